"""Students' code plants symbolic links in its workspace, and the next file requests go through them.

    python scenarios/hostile_workspace.py [--runners N] [--seed S] [--report FILE] [--plot FILE.svg]

Each of N clients claims a runner and, as a student's code would, runs an execution that plants
links (``ln -s / up``, ``ln -s /etc etc``, a link to a file outside, a chain of two links, links to
a directory outside, and links that stay inside); then it asks the daemon, through Poseidon's API as
CodeOcean would, to download, list, delete and copy through them, and replaces a directory it copied
into by a link between two requests. The containers of the simulated cluster run /bin/sh in real
directories; "outside" is a directory of this machine's, one for each client, with files of its own.

Invariants (docs/workspace-security.md, docs/api.md): every download or listing through a link that
leads out of the workspace is a 424 saying so; a listing of a link shows it as a link with its
target; a delete through such a link is a 204 that deletes nothing outside, and a delete of a link
removes the link only; a copy through a link is a 204 that replaces the link by a directory (or by
the file) in the workspace; nothing outside the workspace is written, deleted or read (no response
holds a byte of a file outside); links that stay inside are followed; the same requests on plain
paths succeed.
"""

from __future__ import annotations

import argparse
import base64
import shlex
import shutil
import tempfile
from pathlib import Path
from typing import Any, Final

import httpx
import trio
from harness import EXIT_0, Scenario, open_scenario, parse_arguments, run, terminal_messages

from supervisor.simulator import SimConfig

LEADS_OUT: Final = "a link leads it out of the workspace"
MISSING: Final = "no such file"
# The first line of this machine's /etc/passwd starts so; no answer may hold it.
PASSWD: Final = "root:x:0:0:"


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root``: a file's bytes, None for a directory, the target for a link."""
    found: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            found[name] = b"-> " + str(path.readlink()).encode()
        elif path.is_dir():
            found[name] = None
        else:
            found[name] = path.read_bytes()
    return found


class Client:
    """One client and its runner: what it asked, and how each answer matched the documented one."""

    def __init__(self, scenario: Scenario, number: int, runner: str, outside: Path, seed: int) -> None:
        self.scenario = scenario
        self.runner = runner
        self.files = f"/runners/{runner}/files"
        self.outside = outside
        self.secret = f"outside secret {seed}-{number}\n"
        self.deep = f"outside deep {seed}-{number}\n"
        # (kind, what was asked, whether its answer was the documented one)
        self.answers: list[tuple[str, str, bool]] = []
        self.bodies: list[bytes] = []

    def prepare_outside(self) -> None:
        (self.outside / "sub").mkdir(parents=True)
        (self.outside / "secret.txt").write_text(self.secret)
        (self.outside / "sub" / "deep.txt").write_text(self.deep)

    def up(self, path: str) -> str:
        """``path`` under the outside directory, through the link ``up`` to ``/``."""
        return "up" + str(self.outside / path)

    def note(self, kind: str, asked: str, response: httpx.Response, status: int, holds: str | None) -> None:
        self.bodies.append(response.content)
        matched = response.status_code == status
        if holds is not None:
            text = response.json()["message"] if status >= 400 and matched else response.text
            matched = matched and holds in text
        self.answers.append((kind, asked, matched))
        if not matched:
            self.scenario.event(
                "answer not as documented",
                runner=self.runner,
                kind=kind,
                asked=asked,
                status=response.status_code,
                expected=status,
                body=response.text[:200],
            )

    async def execute(self, command: str) -> bool:
        ends = terminal_messages(await self.scenario.execute(self.runner, command))
        if ends != EXIT_0:
            self.scenario.event("execution failed", runner=self.runner, command=command, ends=ends)
        return ends == EXIT_0

    async def download(self, kind: str, path: str, status: int, holds: str | None = None) -> None:
        response = await self.scenario.http.get(f"{self.files}/raw", params={"path": path})
        self.note(kind, f"download {path}", response, status, holds)

    async def listing(
        self, kind: str, path: str, status: int, holds: str | None = None, *, recursive: bool = True
    ) -> list[dict[str, Any]]:
        params = {"path": path, "recursive": str(recursive).lower()}
        response = await self.scenario.http.get(self.files, params=params)
        self.note(kind, f"list {path}", response, status, holds)
        return list(response.json()["files"]) if response.status_code == 200 else []

    async def patch(self, kind: str, body: dict[str, Any], status: int = 204) -> None:
        response = await self.scenario.http.patch(self.files, json=body)
        self.note(kind, f"patch {body}", response, status, None)

    async def delete(self, kind: str, path: str) -> None:
        await self.patch(kind, {"delete": [path]})

    async def copy(self, kind: str, path: str, content: str) -> None:
        encoded = base64.b64encode(content.encode()).decode()
        await self.patch(kind, {"copy": [{"path": path, "content": encoded}]})

    def shows(self, kind: str, asked: str, holds: bool) -> None:
        self.answers.append((kind, asked, holds))
        if not holds:
            self.scenario.event("listing not as documented", runner=self.runner, asked=asked)


async def play(client: Client, planted: list[bool]) -> None:
    """One student's story: plant links, then send every kind of file request through them."""
    out = shlex.quote(str(client.outside))
    plant = (
        "mkdir -p real/dir && echo inside > real/dir/file.txt && ln -s / up && ln -s /etc etc && "
        f"ln -s {out}/secret.txt secret && ln -s chain2 chain1 && ln -s {out} chain2 && "
        f"ln -s {out} out && ln -s {out}/sub/deep.txt deeplink && ln -s real/dir inlink && "
        "ln -s inlink inchain"
    )
    planted.append(await client.execute(plant))
    link = "through a link"
    for path in ("up/etc/passwd", "etc/passwd", "secret", "chain1/secret.txt", "out/sub/deep.txt"):
        await client.download(link, path, 424, LEADS_OUT)
    for path in (client.up("secret.txt"), "deeplink", "/workspace/chain1/sub/deep.txt"):
        await client.download(link, path, 424, LEADS_OUT)
    for path in ("up/etc", "out/sub", "chain1/sub", client.up("sub")):
        await client.listing(link, path, 424, LEADS_OUT, recursive=False)
    await client.listing(link, "chain2/sub", 424, LEADS_OUT)
    for path, target in (("out", str(client.outside)), ("secret", f"{client.outside}/secret.txt")):
        entries = await client.listing(link, path, 200)
        shown = [(e["name"], e["entryType"], e.get("linkTarget")) for e in entries]
        client.shows(link, f"list {path} shows the link", shown == [(f"./{path}", "l", target)])

    for path in ("out/secret.txt", "chain1/sub", client.up("sub/deep.txt"), "deeplink"):
        await client.delete(link, path)
    await client.listing(link, "deeplink", 424, MISSING)
    await client.copy(link, "out/pwned.txt", "pwned\n")
    await client.download(link, "out/pwned.txt", 200, "pwned")
    replaced = sorted((e["name"], e["entryType"]) for e in await client.listing(link, "out", 200))
    client.shows(link, "out is a directory now", replaced == [("./out/pwned.txt", "-")])
    await client.copy(link, client.up("pwned.txt"), "pwned by root\n")
    await client.download(link, client.up("pwned.txt"), 200, "pwned by root")
    await client.copy(link, "secret", "replaced\n")
    await client.download(link, "secret", 200, "replaced")
    await client.copy(link, "chain1/deeper/pwned.txt", "deeper\n")
    await client.download(link, "chain1/deeper/pwned.txt", 200, "deeper")

    swap = "a directory swapped for a link"
    await client.copy(swap, "work/a.txt", "a\n")
    await client.download(swap, "work/a.txt", 200, "a")
    planted.append(await client.execute(f"rm -rf work && ln -s {out} work"))
    await client.download(swap, "work/secret.txt", 424, LEADS_OUT)
    await client.listing(swap, "work/sub", 424, LEADS_OUT)
    await client.delete(swap, "work/secret.txt")
    await client.copy(swap, "work/b.txt", "b\n")
    await client.download(swap, "work/b.txt", 200, "b")
    await client.download(swap, "work/secret.txt", 424, MISSING)

    inside = "through a link inside"
    await client.download(inside, "inlink/file.txt", 200, "inside")
    await client.download(inside, "inchain/file.txt", 200, "inside")
    files = await client.listing(inside, "inchain/", 200)
    client.shows(inside, "list inchain shows the link", [e["entryType"] for e in files] == ["l"])
    await client.delete(inside, "inlink/file.txt")
    await client.download(inside, "real/dir/file.txt", 424, MISSING)

    plain = "a plain path"
    await client.copy(plain, "plain/x.txt", "plain\n")
    files = await client.listing(plain, "plain", 200)
    client.shows(plain, "list plain", [f["name"] for f in files] == ["./plain/x.txt"])
    await client.download(plain, "plain/x.txt", 200, "plain")
    await client.download(plain, "/workspace/plain/x.txt", 200, "plain")
    await client.delete(plain, "plain/x.txt")
    await client.download(plain, "plain/x.txt", 424, MISSING)


def _matched(clients: list[Client], kind: str) -> tuple[bool, str]:
    answers = [ok for client in clients for k, _, ok in client.answers if k == kind]
    return bool(answers) and all(answers), f"{sum(answers)} of {len(answers)}"


async def main(args: argparse.Namespace) -> bool:
    config = SimConfig(seed=args.seed, servers=1, nodes=3, alloc_start_delay=0.05)
    outside_root = Path(tempfile.mkdtemp(prefix="hostile-outside-"))
    try:
        async with open_scenario("hostile_workspace", args.seed, config) as scenario:
            await scenario.create_environment(args.runners)
            runners = [await scenario.claim() for _ in range(args.runners)]
            clients = [
                Client(scenario, n, runner, outside_root / f"client-{n}", args.seed)
                for n, runner in enumerate(runners)
            ]
            for client in clients:
                client.prepare_outside()
            before = _snapshot(outside_root)
            scenario.event("links planted, requests through them", clients=len(clients))
            planted: list[bool] = []
            async with trio.open_nursery() as nursery:
                for client in clients:
                    nursery.start_soon(play, client, planted)
            after = _snapshot(outside_root)
            scenario.event("requests done")

            scenario.check("links_planted", all(planted), f"{sum(planted)} of {len(planted)}", "all")
            kinds = (
                ("through_links_as_documented", "through a link"),
                ("swapped_directory_as_documented", "a directory swapped for a link"),
                ("links_inside_followed", "through a link inside"),
                ("plain_paths_succeed", "a plain path"),
            )
            for name, kind in kinds:
                ok, value = _matched(clients, kind)
                scenario.check(name, ok, value, "all")
            written = sorted(p for p in after if before.get(p) != after[p])
            scenario.check("nothing_outside_written", not written, written[:5], [])
            deleted = sorted(p for p in before if p not in after)
            scenario.check("nothing_outside_deleted", not deleted, deleted[:5], [])
            forbidden: list[bytes] = [PASSWD.encode()]
            for client in clients:
                forbidden += [client.secret.encode(), client.deep.encode()]
            leaked = sum(any(secret in body for secret in forbidden) for c in clients for body in c.bodies)
            scenario.check("nothing_outside_read", leaked == 0, leaked, 0)

            for runner in runners:
                await scenario.http.delete(f"/runners/{runner}")
            await scenario.check_no_leaked_jobs()
            return scenario.report(args.report, args.plot)
    finally:
        shutil.rmtree(outside_root, ignore_errors=True)


if __name__ == "__main__":
    run(main, parse_arguments(__doc__.splitlines()[0], default_runners=8))
