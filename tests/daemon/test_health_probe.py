"""``supervisor health``: the probe's exit codes against a running daemon."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from supervisor.base.levels import StreamState
from supervisor.cli import main
from supervisor.core.config import ServerSettings, Settings
from supervisor.ops.probe import probe

from .conftest import Harness


async def run_probe(harness: Harness, *, token: str = "", as_json: bool = False) -> tuple[int, str]:
    url = harness.daemon.addresses[0]
    return await trio.to_thread.run_sync(lambda: probe(url, token=token, timeout=5, as_json=as_json))


@pytest.mark.parametrize("settings", [Settings(server=ServerSettings(port=0, token="s3cret"))])
async def test_probe_exit_codes(harness: Harness, settings: Settings) -> None:
    await harness.environment(10)
    await harness.wait_for(lambda: harness.idle(10) == 2)
    code, text = await run_probe(harness, token="s3cret")
    assert (code, text.split(":")[0]) == (0, "OK")
    assert "stream up" in text

    harness.service.gate.report(StreamState.DOWN)
    code, text = await run_probe(harness, token="s3cret")
    assert (code, text.split(":")[0]) == (1, "WARNING"), "down briefly: degraded"

    harness.service.gate._down_since = trio.current_time() - 120  # down for two minutes
    code, text = await run_probe(harness, token="s3cret", as_json=True)
    assert code == 2
    assert json.loads(text)["checks"]["event_stream"]["status"] == "critical"

    code, text = await run_probe(harness, token="wrong")
    assert code == 3
    assert "HTTP 401" in text
    assert "--token" in text, "it says how to pass the token"


async def test_probe_of_nothing_is_unknown() -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()
    code, text = await trio.to_thread.run_sync(
        lambda: probe(f"http://127.0.0.1:{port}", token="", timeout=2, as_json=False)
    )
    assert code == 3
    assert text.startswith("UNKNOWN: the supervisor at")


@pytest.mark.parametrize("settings", [Settings(server=ServerSettings(port=0, token="s3cret"))])
async def test_the_probe_takes_its_token_off_the_command_line(
    harness: Harness,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = harness.daemon.addresses[0]
    await harness.environment(10)
    await harness.wait_for(lambda: harness.idle(10) == 2)

    async def health(*argv: str) -> tuple[int, str]:
        code = await trio.to_thread.run_sync(main, ["health", "--url", url, *argv])
        return code, capsys.readouterr().out

    monkeypatch.delenv("SUPERVISOR_SERVER_TOKEN", raising=False)
    code, text = await health()
    assert code == 3
    assert "HTTP 401: it wants a token; pass its server.token with --token, --token-file or" in text
    code, text = await health("--token", "wrong1")
    assert code == 3
    assert "HTTP 401: it refuses the token given; pass its server.token with --token" in text

    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")
    code, text = await health("--token-file", str(token_file))
    assert (code, text.split(":")[0]) == (0, "OK"), "the file's token, its newline dropped"

    monkeypatch.setenv("SUPERVISOR_SERVER_TOKEN", "s3cret")
    code, text = await health()
    assert (code, text.split(":")[0]) == (0, "OK"), "the environment's token"
