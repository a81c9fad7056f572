"""The report of ``quotaql tune`` (the evidence of each change, then the diff), and
:func:`tune`, which makes it for a file."""

from __future__ import annotations

import difflib
import os
import tempfile
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Final

import tomlkit

from quotaql.config import load_cost_config
from quotaql.errors import ConfigError
from quotaql.tune._show import percent
from quotaql.tune.editing import edit
from quotaql.tune.evidence import TuneError
from quotaql.tune.proposal import Options, propose
from quotaql.tune.weights import WeightOptions, propose_weights

if TYPE_CHECKING:
    from collections.abc import Sequence

    from quotaql.tune.evidence import Evidence
    from quotaql.tune.proposal import Change, Proposal


MAX_CANDIDATE_BYTES: Final = 16 * 1024 * 1024
"""A candidate file larger than this is refused (a [cost] table is far smaller)."""


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
    weights: WeightOptions | None = None,
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
    if weights is not None:
        reference = weights.reference or "the field with the most calls"
        out.append(
            f"weights: each field's mean time per call relative to the reference's ({reference}),"
            f" where it lies within what the middle half of its subjects saw; a weight needs"
            f" {weights.min_calls}+ calls and {weights.min_subjects}+ subject-minutes"
        )
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
    weights: WeightOptions | None = None,
    candidate: bool = False,
) -> tuple[str, Proposal]:
    """Propose list sizes (and, with ``weights``, field weights) for ``config`` from
    ``evidence``: the report (:func:`render`) and the proposal; with ``write``, the edited
    text replaces the file.

    With ``candidate``, the proposal is written to the file ``[cost] candidate`` names
    instead (created, from the ``[cost]`` table of ``config``, when missing): the live file
    is not touched, and the report's diff is of the candidate.

    Raises:
        TuneError: ``config`` cannot be read or is not a valid quotaql.toml; with
            ``candidate``, it names no candidate, or the candidate cannot be read or written.
    """
    path = os.fspath(config)
    try:
        cost = load_cost_config(path)
    except ConfigError as error:
        raise TuneError(str(error)) from None
    try:
        old = Path(path).read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:  # pragma: no cover  (it just loaded)
        raise TuneError(f"cannot read {path}: {exc}") from None
    proposal = propose(evidence, cost.model, options)
    if weights is not None:
        propose_weights(evidence, cost.model, proposal, weights)
    shown, base, before = path, old, old
    if candidate:
        if cost.candidate is None:
            raise TuneError(
                f'{path}: [cost] names no candidate: add candidate = "quotaql.candidate.toml"'
                " to its [cost] table to write the proposal there (docs/tuning.md)"
            )
        shown = cost.candidate
        existing = _read_candidate(shown)
        base = existing if existing is not None else _candidate_of(old, path)
        before = existing or ""
    new, skipped = edit(base, proposal.changes)
    if candidate and proposal.changes and new != before:
        _replace(shown, new)
    elif write and new != old:
        _replace(path, new)
    report = render(proposal, evidence, shown, before, new, skipped, options, weights)
    return report, proposal


def _read_candidate(path: str) -> str | None:
    """The candidate's text (None: there is no such file yet)."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TuneError(f"cannot read the candidate {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_CANDIDATE_BYTES:
        raise TuneError(f"{path}: larger than {MAX_CANDIDATE_BYTES // 2**20} MiB: not a candidate")
    try:
        text = raw.decode("utf-8")
        data = tomllib.loads(text)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TuneError(f"{path}: the candidate is not a TOML file: {exc}") from None
    if not isinstance(data.get("cost", {}), dict):
        raise TuneError(f"{path}: the candidate's cost is not a table")
    return text


def _candidate_of(live: str, path: str) -> str:
    """A new candidate: the ``[cost]`` table of the live file ``path`` (without its own
    ``candidate`` and ``candidate_sample``), which the proposal then edits."""
    cost = dict(tomllib.loads(live).get("cost", {}))
    for key in ("candidate", "candidate_sample"):
        cost.pop(key, None)
    header = (
        f"# A candidate [cost] table for {Path(path).name}, written by quotaql tune"
        " --candidate:\n# priced live on a sample, never charged. Promote it by moving its"
        " [cost] table into the live file.\n"
    )
    return header + tomlkit.dumps({"cost": cost})


def _replace(path: str, text: str) -> None:
    """Write ``text`` to ``path`` at once (a server reloading it sees the old or the new)."""
    target = Path(path)
    try:
        mode = target.stat().st_mode & 0o7777
    except FileNotFoundError:  # a new candidate
        mode = 0o644
    descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(text.encode("utf-8"))
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
