"""The report of ``quotaql tune`` (the evidence of each change, then the diff), and
:func:`tune`, which makes it for a file."""

from __future__ import annotations

import difflib
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from quotaql.config import load_cost_config
from quotaql.errors import ConfigError
from quotaql.tune._show import percent
from quotaql.tune.editing import edit
from quotaql.tune.evidence import TuneError
from quotaql.tune.proposal import Options, propose

if TYPE_CHECKING:
    from collections.abc import Sequence

    from quotaql.tune.evidence import Evidence
    from quotaql.tune.proposal import Change, Proposal


def _diff(path: str, old: str, new: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), path, path
    )
    return "".join(
        line if line.endswith("\n") else f"{line}\n\\ No newline at end of file\n" for line in lines
    )


def render(
    proposal: Proposal,
    evidence: Evidence,
    path: str,
    old: str,
    new: str,
    skipped: Sequence[Change] = (),
    options: Options | None = None,
) -> str:
    """The report: ``#`` comment lines (the evidence of each change, the notes, the
    estimates), then the unified diff of ``path`` (``patch`` and ``git apply`` skip the
    comment lines)."""
    options = options or Options()
    sources = ", ".join(evidence.sources)
    if evidence.window is None:
        counts = "totals since each server process started (exact)"
    else:
        counts = f"Prometheus increase() over {evidence.window} (extrapolated, rounded)"
    out = [
        f"quotaql tune: {path}, from {sources}",
        f"counts: of the sampled operations, {counts}; a proposed size holds at least"
        f" p{percent(options.quantile)} of a field's lists and needs {options.min_lists}+ lists",
    ]
    for change in proposal.changes:
        out.append("")
        out.extend(change.evidence)
    for change in skipped:
        out.append("")
        out.append(
            f"not edited (its layout in {path} is not one tune edits): set {change.key} ="
            f" {change.new} by hand"
        )
    if proposal.notes:
        out.append("")
        out.append("notes:")
        out.extend(f"  {note}" for note in proposal.notes)
    if proposal.estimates:
        out.append("")
        out.append("estimates (actual / estimated cost per operation, by operation type / tier):")
        out.extend(f"  {line}" for line in proposal.estimates)
    if not proposal.changes:
        out.append("")
        out.append("no change proposed")
    report = "".join(f"# {line}".rstrip() + "\n" for line in out)
    return report + _diff(path, old, new)


def tune(
    config: str | os.PathLike[str],
    evidence: Evidence,
    options: Options | None = None,
    *,
    write: bool = False,
) -> tuple[str, Proposal]:
    """Propose list sizes for ``config`` from ``evidence``: the report (:func:`render`) and
    the proposal; with ``write``, the edited text replaces the file.

    Raises:
        TuneError: ``config`` cannot be read or is not a valid quotaql.toml.
    """
    path = os.fspath(config)
    try:
        model = load_cost_config(path).model
    except ConfigError as error:
        raise TuneError(str(error)) from None
    try:
        old = Path(path).read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:  # pragma: no cover  (it just loaded)
        raise TuneError(f"cannot read {path}: {exc}") from None
    proposal = propose(evidence, model, options)
    new, skipped = edit(old, proposal.changes)
    if write and new != old:
        _replace(path, new)
    return render(proposal, evidence, path, old, new, skipped, options), proposal


def _replace(path: str, text: str) -> None:
    """Write ``text`` to ``path`` at once (a server reloading it sees the old or the new)."""
    target = Path(path)
    mode = target.stat().st_mode & 0o7777
    descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(text.encode("utf-8"))
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
