"""hclsyntax's ``Body.Content`` checks, as gohcl and ``jobspec2`` meet them: an argument or a
block a schema does not have (with hcl's "Did you mean" hints), and a block's labels against the
schema's label names."""

from __future__ import annotations

from collections.abc import Iterable

from .tree import Block, Body, Diagnostic, Range

__all__ = ["Checker"]


def _levenshtein(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def _suggestion(name: str, candidates: Iterable[str]) -> str:
    return next((c for c in candidates if _levenshtein(name, c) < 3), "")


class Checker:
    """Collects diagnostics, every one found, as hcl does before it gives up."""

    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []

    def problem(self, summary: str, detail: str, subject: Range | None) -> None:
        """Note one diagnostic."""
        self.diagnostics.append(Diagnostic(summary, detail, subject))

    def unsupported(
        self,
        body: Body,
        *,
        attributes: Iterable[str],
        blocks: Iterable[str],
        unread: Iterable[str] = (),
        skip_attributes: set[str] | frozenset[str] = frozenset(),
        skip_blocks: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        """hclsyntax's ``Body.Content``: an argument or block the schema does not have."""
        attributes, blocks, unread = list(attributes), list(blocks), set(unread)
        for name, attribute in body.attributes.items():
            if name in attributes or name in skip_attributes:
                continue
            unset = [a for a in attributes if a not in body.attributes]
            hint = _suggestion(name, unset)
            if hint:
                hint = f' Did you mean "{hint}"?'
            elif name in blocks:
                hint = f' Did you mean to define a block of type "{name}"?'
            self.problem(
                "Unsupported argument",
                f'An argument named "{name}" is not expected here.{hint}',
                attribute.name_range,
            )
        for block in body.blocks:
            if block.type in skip_blocks:
                continue
            if block.type in unread:
                self.problem(
                    "Unsupported block type",
                    f'Blocks of type "{block.type}" are valid in Nomad but not read by the simulated '
                    "cluster.",
                    block.type_range,
                )
            elif block.type not in blocks:
                hint = _suggestion(block.type, blocks)
                if hint:
                    hint = f' Did you mean "{hint}"?'
                elif block.type in attributes:
                    hint = (
                        f' Did you mean to define argument "{block.type}"? If so, use the equals sign to '
                        "assign it a value."
                    )
                self.problem(
                    "Unsupported block type",
                    f'Blocks of type "{block.type}" are not expected here.{hint}',
                    block.type_range,
                )

    def labels_fit(self, block: Block, names: list[str]) -> bool:
        """Whether the block has as many labels as its schema names (hcl's diagnostics if not)."""
        have, want = len(block.labels), len(names)
        listed = ", ".join(names)
        if have > want:
            detail = (
                f"No labels are expected for {block.type} blocks."
                if not names
                else f"Only {want} labels ({listed}) are expected for {block.type} blocks."
            )
            self.problem(f"Extraneous label for {block.type}", detail, block.label_ranges[want])
            return False
        if have < want:
            self.problem(
                f"Missing {names[have]} for {block.type}",
                f"All {block.type} blocks must have {want} labels ({listed}).",
                block.open_brace_range,
            )
            return False
        return True
