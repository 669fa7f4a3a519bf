"""Images as a registry and the nodes' docker daemons hold them: each tag points to a digest, each
node keeps the digest it pulled of each image, and each task runs the digest its node had.

A tag nobody pushed resolves to a digest made from its name (the SHA-256 of ``name:tag``), so every
run of the cluster agrees on it; ``POST /sim/v1/images`` moves a tag to another digest, as a push
of a rebuilt image under the same tag does. A task placed on a node uses the digest the node
already has of its image; it pulls (the tag's current digest) when the node has none, when the
task's docker config says ``force_pull = true``, or when the tag is ``latest``, as Nomad's docker
driver does (``createImage`` looks for a local image only for another tag). References are
normalized as docker does: no tag is ``:latest``; one pinned by digest (``name@sha256:...``) is
that digest.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Final

__all__ = ["ImageError", "ImageRegistry", "image_variables", "parse_reference"]

_DIGEST: Final = re.compile(r"sha256:[0-9a-f]{64}")
# Docker's reference grammar, loosely: lowercase path components, an optional registry host with
# a port, a tag of word characters, dots and dashes.
_NAME: Final = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*")
_HOST: Final = re.compile(r"[A-Za-z0-9.-]+(?::[0-9]+)?")
_TAG: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


class ImageError(ValueError):
    """An image reference or a digest docker would not take."""


def parse_reference(image: object) -> tuple[str, str]:
    """``(repository, tag or digest)`` of an image reference, as docker reads it: no tag is
    ``latest``. Raises ImageError for what docker calls an invalid reference format."""
    if not isinstance(image, str) or not image:
        raise ImageError('image must be a non-empty string such as "name:tag"')
    name, at, digest = image.partition("@")
    if at:
        if not _DIGEST.fullmatch(digest):
            raise ImageError(f"{image!r}: the digest must be sha256: and 64 lowercase hex digits")
        return _repository(image, name), digest
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = "latest"
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
        if not _TAG.fullmatch(tag):
            raise ImageError(f"{image!r}: invalid tag {tag!r}")
    return _repository(image, name), tag


def _repository(image: str, name: str) -> str:
    host, slash, path = name.partition("/")
    if slash and ("." in host or ":" in host or host == "localhost"):
        valid = _HOST.fullmatch(host) is not None and _NAME.fullmatch(path) is not None
    else:
        valid = _NAME.fullmatch(name) is not None
    if not valid:
        raise ImageError(f"{image!r}: invalid reference format (a repository name must be lowercase)")
    return name


def check_digest(digest: object) -> str:
    """A content digest as a registry writes it, or ImageError."""
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise ImageError(f"digest must be sha256: and 64 lowercase hex digits, got {digest!r}")
    return digest


class ImageRegistry:
    """The registry's tags, and what each node pulled."""

    def __init__(self) -> None:
        self._tags: dict[str, str] = {}
        self._pulled: dict[str, dict[str, str]] = {}

    def resolve(self, image: object) -> tuple[str, str]:
        """``(repository:tag, digest)`` the reference points to now."""
        repository, tag = parse_reference(image)
        if tag.startswith("sha256:"):
            return f"{repository}@{tag}", tag
        reference = f"{repository}:{tag}"
        digest = self._tags.get(reference)
        if digest is None:
            digest = "sha256:" + hashlib.sha256(reference.encode()).hexdigest()
        return reference, digest

    def push(self, image: object, digest: object) -> tuple[str, str, str]:
        """The tag now points to ``digest``: ``(repository:tag, previous digest, digest)``."""
        reference, previous = self.resolve(image)
        if "@" in reference:
            raise ImageError(f"{image!r}: a digest reference cannot be moved; give name:tag")
        self._tags[reference] = check_digest(digest)
        return reference, previous, self._tags[reference]

    def run_on(self, node_id: str, image: str, *, force_pull: bool) -> str:
        """The image a task started on the node runs, as ``repository@digest``: what the node has
        of it, pulled first if it has none, ``force_pull``, or the tag is ``latest``."""
        reference, current = self.resolve(image)
        repository = reference.rsplit("@", 1)[0] if "@" in reference else reference.rsplit(":", 1)[0]
        cache = self._pulled.setdefault(node_id, {})
        if force_pull or reference.endswith(":latest") or reference not in cache:
            cache[reference] = current
        return f"{repository}@{cache[reference]}"

    def forget_node(self, node_id: str) -> None:
        """The node is gone, with its images."""
        self._pulled.pop(node_id, None)

    def describe(self, node_names: dict[str, str]) -> dict[str, Any]:
        """Tags pushed, and each node's images, for ``GET /sim/v1/state``."""
        return {
            "tags": dict(sorted(self._tags.items())),
            "nodes": {
                node_names.get(node_id, node_id): dict(sorted(pulled.items()))
                for node_id, pulled in sorted(self._pulled.items())
            },
        }


def image_variables(images: dict[str, str], task: str) -> dict[str, str]:
    """What a command of the task sees of its image: ``SIMULATED_IMAGE=repository@digest``."""
    image = images.get(task)
    return {"SIMULATED_IMAGE": image} if image else {}
