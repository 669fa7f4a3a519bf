"""File operations in runners, through Nomad's exec: copy (a tar on stdin), delete, list, download.

A download streams: a task in the execution nursery owns the exec session and hands its output over
a small channel, so a file of any size passes through without being held in memory, and a client
that goes away ends the session and has the command stopped.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from functools import partial
from typing import Any, Final

import trio
from attrs import frozen
from loguru import logger

from ..base.entropy import Entropy
from ..base.errors import (
    ExecAgentUnreachable,
    FileNotAvailable,
    FileOperationFailed,
    InvalidRequest,
    SupervisorError,
)
from ..core.commands import noted_command, unprivileged_command
from ..core.config import ExecutionSettings
from ..effects.stopping import CommandStops
from ..nomad import ExecExited
from ..nomad.api import ExecChannel, ExecOpener
from .container_files import (
    container_path,
    list_container_command,
    parse_ls_listing,
    read_container_file_command,
)
from .workspace import (
    CLEAR_WORKSPACE,
    DIRECTORY_EXIT_CODE,
    ESCAPE_EXIT_CODE,
    MISSING_EXIT_CODE,
    delete_and_copy_command,
    list_files_command,
    parse_file_listing,
    read_file_command,
    tar_archive,
    workspace_path,
)

__all__ = ["Download", "FileService", "resolve_patch"]

_STDIN_CHUNK: Final = 64 * 1024
_DOWNLOAD_BUFFER: Final = 16  # exec output chunks (at most 4 KiB each) between Nomad and the client
_MAX_STDERR: Final = 64 * 1024
_MAX_LISTING: Final = 64 * 1024 * 1024
# The line a download's command writes first: the file's size in decimal digits.
_MAX_SIZE_LINE: Final = 32


def resolve_patch(
    delete: Sequence[str], copy: Sequence[tuple[str, bytes]], workspace: str, *, max_files: int
) -> tuple[list[str], list[tuple[str, bytes | None]]]:
    """A PATCH's paths (the API has read its shape) made relative to the workspace and checked: at
    most ``max_files`` entries in all; a copy's path ending in "/" is a directory (None)."""
    if len(delete) + len(copy) > max_files:
        raise InvalidRequest(f"at most {max_files} delete and copy entries are taken in one request")
    deletions = []
    for i, path in enumerate(delete):
        if path == CLEAR_WORKSPACE or path in ("./", ".", "*"):
            deletions.append(".")
        else:
            deletions.append(workspace_path(path, workspace, field=f"delete[{i}]"))
    copies: list[tuple[str, bytes | None]] = []
    for i, (path, content) in enumerate(copy):
        relative = workspace_path(path, workspace, field=f"copy[{i}].path")
        if relative == ".":
            raise InvalidRequest(f"copy[{i}].path names the workspace itself")
        copies.append((relative, None if path.endswith("/") else content))
    return deletions, copies


@frozen
class _Ended:
    exit_code: int
    stderr: bytes


_DownloadItem = bytes | _Ended | SupervisorError


class FileService:
    """File operations, each a command in the runner through exec. A command whose session ends
    before it does (a lost connection, a client gone, a cancelled request) is stopped, since Nomad
    leaves it running: a tar would wait for the rest of its stdin for ever."""

    def __init__(
        self,
        client: ExecOpener,
        settings: ExecutionSettings,
        stops: CommandStops,
        *,
        execution_nursery: trio.Nursery,
        allocation_in_use: Callable[[str], bool],
        entropy: Entropy | None = None,
    ) -> None:
        self._client = client
        self._stops = stops
        # Where the IDs that note each command (for a later stop to find it) come from.
        self._entropy = Entropy() if entropy is None else entropy
        self._allocation_in_use = allocation_in_use
        self._task = settings.task
        self._unprivileged_wrapper = settings.unprivileged_wrapper
        self.workspace = settings.workspace
        # Where downloads read: not under the request.
        self._nursery = execution_nursery

    @contextlib.asynccontextmanager
    async def _session(self, alloc_id: str, argv: Sequence[str]) -> AsyncIterator[ExecChannel]:
        note_id = self._entropy.uuid()
        started = unreachable = False
        try:
            async with self._client.open_exec(
                alloc_id, task=self._task, command=noted_command(argv, note_id)
            ) as session:
                started = True
                yield session
        except ExecAgentUnreachable:
            unreachable = True  # Nomad refused before the command started: nothing to stop
            raise
        finally:
            if started and not unreachable and session.exited is None:
                await self._stops.stop_in_runner(
                    alloc_id, note_id, needed=partial(self._allocation_in_use, alloc_id)
                )

    async def _run(
        self, alloc_id: str, argv: Sequence[str], *, stdin: bytes | None = None, limit: int = _MAX_LISTING
    ) -> tuple[int, bytes, bytes]:
        """The command's exit code, stdout and stderr. Output past ``limit`` fails at once, and the
        command is stopped (``ls -lR /`` through ``/proc`` would run on for a long time)."""
        stdout, stderr = bytearray(), bytearray()
        exited: ExecExited | None = None
        async with self._session(alloc_id, argv) as session:
            if stdin is not None:
                for start in range(0, len(stdin), _STDIN_CHUNK):
                    await session.send_stdin(stdin[start : start + _STDIN_CHUNK])
                await session.close_stdin()
            async for frame in session:  # it ends after the exit
                if isinstance(frame, ExecExited):
                    exited = frame
                elif frame.stream != "stdout":
                    stderr += frame.data[: max(0, _MAX_STDERR - len(stderr))]
                else:
                    stdout += frame.data
                    if len(stdout) > limit:
                        raise FileOperationFailed(
                            f"the output is larger than the {limit >> 20} MiB this operation takes"
                        )
        if exited is None:
            raise FileOperationFailed("the command's session ended without its exit")
        return exited.exit_code, bytes(stdout), bytes(stderr)

    async def update(
        self, alloc_id: str, deletions: list[str], copies: list[tuple[str, bytes | None]]
    ) -> None:
        """Delete, then copy, in the workspace of the allocation (a PATCH of Poseidon's API)."""
        archive = tar_archive(copies, mtime=time.time()) if copies else None
        argv = delete_and_copy_command(deletions, copies)
        code, _, stderr = await self._run(alloc_id, argv, stdin=archive)
        if code != 0:
            raise FileOperationFailed(
                f"updating files failed (exit {code}): {stderr.decode(errors='replace').strip()}"
            )

    def _as(self, argv: Sequence[str], *, privileged: bool) -> list[str]:
        """Reads run as the client's executions would: unprivileged unless asked otherwise."""
        return list(argv) if privileged else unprivileged_command(argv, self._unprivileged_wrapper)

    async def _list_container(
        self, alloc_id: str, path: str, *, recursive: bool, privileged: bool
    ) -> list[dict[str, Any]]:
        """As Poseidon: whatever ``ls`` wrote is the listing (a directory it could not open on the
        way is left out), and nothing written with a failure is a path not available (424)."""
        argv = self._as(list_container_command(path, recursive=recursive), privileged=privileged)
        code, stdout, stderr = await self._run(alloc_id, argv)
        detail = stderr.decode(errors="replace").strip()
        if not stdout and code != 0:
            raise FileNotAvailable(f"{path}: not available, or not readable: {detail or f'exit {code}'}")
        if code != 0:
            logger.debug("listing {} in {} was partial (exit {}): {}", path, alloc_id, code, detail)
        return parse_ls_listing(stdout)

    async def list(
        self, alloc_id: str, path: str, *, recursive: bool, privileged: bool = False
    ) -> list[dict[str, Any]]:
        """The entries under ``path`` as Poseidon's API lists them: in the workspace for a relative
        path (or an absolute one inside the workspace), anywhere in the container for another
        absolute path, as Poseidon lists it."""
        absolute = container_path(path, self.workspace)
        if absolute is not None:
            return await self._list_container(alloc_id, absolute, recursive=recursive, privileged=privileged)
        relative = workspace_path(path, self.workspace)
        argv = self._as(list_files_command(relative, recursive=recursive), privileged=privileged)
        code, stdout, stderr = await self._run(alloc_id, argv)
        if code == MISSING_EXIT_CODE:
            raise FileNotAvailable(f"{path}: no such file or directory")
        if code == ESCAPE_EXIT_CODE:
            raise FileNotAvailable(f"{path}: a link leads it out of the workspace")
        if code != 0:
            raise FileOperationFailed(
                f"listing files failed (exit {code}): {stderr.decode(errors='replace').strip()}"
            )
        named_as = path if path.startswith("/") else None
        return parse_file_listing(stdout, relative, named_as=named_as, recursive=recursive)

    async def download(self, alloc_id: str, path: str, *, privileged: bool = False) -> Download:
        """The file's content as it comes, with its size (None when the size the file system gives
        says nothing, as for a file of ``/proc``). A relative path (or an absolute one inside the
        workspace) is the workspace's; another absolute path is the container's, read as Poseidon
        reads it. Raises FileNotAvailable, before the response starts, when the file does not exist
        or cannot be read; an error after that cuts the download short."""
        absolute = container_path(path, self.workspace)
        if absolute is None:
            command = read_file_command(workspace_path(path, self.workspace))
        else:
            command = read_container_file_command(absolute)
        send, receive = trio.open_memory_channel[_DownloadItem](_DOWNLOAD_BUFFER)
        self._nursery.start_soon(self._read_into, send, alloc_id, self._as(command, privileged=privileged))
        try:
            size, first = await _read_size(receive, path)
        except BaseException:
            receive.close()
            raise
        return Download(first, receive, path, size)

    async def _read_into(
        self, send: trio.MemorySendChannel[_DownloadItem], alloc_id: str, argv: Sequence[str]
    ) -> None:
        async with send:
            try:
                async with self._session(alloc_id, argv) as session:
                    stderr = bytearray()
                    async for frame in session:
                        if isinstance(frame, ExecExited):
                            await send.send(_Ended(frame.exit_code, bytes(stderr)))
                        elif frame.stream == "stdout":
                            await send.send(frame.data)
                        else:
                            stderr += frame.data[: max(0, _MAX_STDERR - len(stderr))]
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return  # the client went away; leaving the session stopped the command
            except Exception as exc:
                if not isinstance(exc, SupervisorError):
                    # A bug in one download must not end the executions running beside it.
                    logger.exception("reading a file in {} failed: {}", alloc_id, argv[-1])
                    exc = SupervisorError("internal error of the supervisor")
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await send.send(exc)


async def _next_item(receive: trio.MemoryReceiveChannel[_DownloadItem], path: str) -> _DownloadItem:
    try:
        return await receive.receive()
    except trio.EndOfChannel:
        return FileOperationFailed(f"reading {path} was cut short")


def _refusal(item: _DownloadItem, path: str) -> SupervisorError:
    """Why a download that has not started cannot: the command's exit code, or the error."""
    if isinstance(item, _Ended) and item.exit_code == MISSING_EXIT_CODE:
        return FileNotAvailable(f"{path}: no such file, or not readable")
    if isinstance(item, _Ended) and item.exit_code == DIRECTORY_EXIT_CODE:
        return FileNotAvailable(f"{path}: is a directory")
    if isinstance(item, _Ended) and item.exit_code == ESCAPE_EXIT_CODE:
        return FileNotAvailable(f"{path}: a link leads it out of the workspace")
    if isinstance(item, _Ended) and item.exit_code == 0:
        return FileOperationFailed(f"reading {path} gave no size before its content")
    return _download_error(item, path)


async def _read_size(
    receive: trio.MemoryReceiveChannel[_DownloadItem], path: str
) -> tuple[int | None, _DownloadItem]:
    """The size line the command writes first, and the first item of the content after it. A
    size of 0 with content after it is unknown (None): a file of ``/proc`` says 0 and has lines."""
    head = b""
    while True:
        item = await _next_item(receive, path)
        if not isinstance(item, bytes):
            raise _refusal(item, path)
        head += item
        line, newline, rest = head.partition(b"\n")
        if newline:
            break
        if len(head) > _MAX_SIZE_LINE:
            raise FileOperationFailed(f"reading {path} gave no size before its content")
    if not line.isdigit():
        raise FileOperationFailed(f"reading {path} gave no size before its content: {line[:40]!r}")
    size: int | None = int(line)
    first: _DownloadItem = rest
    if not rest:
        first = await _next_item(receive, path)
        if not isinstance(first, bytes) and not (isinstance(first, _Ended) and first.exit_code == 0):
            raise _refusal(first, path)
    if size == 0 and isinstance(first, bytes):
        size = None
    return size, first


def _download_error(item: _DownloadItem, path: str) -> SupervisorError:
    if isinstance(item, SupervisorError):
        return item
    assert isinstance(item, _Ended)
    detail = item.stderr.decode(errors="replace").strip()
    return FileOperationFailed(f"reading {path} failed (exit {item.exit_code}): {detail}")


def _uncounted(*_: int) -> None:
    return None


class Download:
    """A file's content as it comes: an async iterator of chunks, and its ``size`` as the file
    system gave it before the first byte was read (None: unknown). ``close`` it when the response
    ends, however it ends, so that the task reading the file stops too.

    A chunk counts as sent (``count_into``) when the response asks for the next one, having sent
    it; the download counts as done when the response asks past the end, every chunk sent."""

    def __init__(
        self,
        first: _DownloadItem,
        receive: trio.MemoryReceiveChannel[_DownloadItem],
        path: str,
        size: int | None = None,
    ) -> None:
        self._next: _DownloadItem | None = first
        self._receive = receive
        self._path = path
        self.size = size
        # The bytes of the chunk handed over last, counted as sent when the next is asked for.
        self._handed = 0
        self._sent: Callable[[int], None] = _uncounted
        self._done: Callable[[], None] = _uncounted

    def count_into(self, sent: Callable[[int], None], done: Callable[[], None]) -> None:
        """Call ``sent`` with the bytes of each chunk once sent, and ``done`` once all are."""
        self._sent, self._done = sent, done

    def __aiter__(self) -> Download:
        return self

    async def __anext__(self) -> bytes:
        if self._handed:
            self._sent(self._handed)
            self._handed = 0
        item, self._next = self._next, None
        if item is None:
            try:
                item = await self._receive.receive()
            except trio.EndOfChannel:
                item = SupervisorError(f"reading {self._path} was cut short")
        if isinstance(item, bytes):
            self._handed = len(item)
            return item
        self.close()
        if isinstance(item, _Ended) and item.exit_code == 0:
            self._done()
            raise StopAsyncIteration
        raise _download_error(item, self._path)

    def close(self) -> None:
        """Stop reading the file: the client went away, or the response ended."""
        self._receive.close()
