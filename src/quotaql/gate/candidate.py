"""Candidate weights, priced live: a sampled share of operations priced with another file's
``[cost]`` table too (``[cost] candidate``, ``candidate_sample``), never charged, and how far
the two disagree recorded (docs/tuning.md, "Candidate weights, priced live").

The gate asks three things of a :class:`Candidate`: whether an operation it just decided is
sampled (:meth:`Candidate.decided`: one random draw, nothing at all without a candidate),
to price a sampled one once it ended (:meth:`Candidate.finished`, after its response was
produced: the candidate's plan is its own, in the analyzer's cache beside the live one's),
and to read the file again (:meth:`Candidate.configure` at start and on each new
``quotaql.toml``; :meth:`Candidate.poll` on the reload timer, when the file alone changed).

The candidate never touches the live pricing: a file that is missing, larger than
``names.MAX_CANDIDATE_BYTES``, not a regular file, not a valid ``quotaql.toml``, or whose
weights name coordinates the schema lacks is logged once per change (WARNING, with its file,
line and key), counted (``quotaql_candidate_errors_total``), and the sampling stops until the
file is fixed. Only its ``[cost]`` table prices; its other tables are checked (it is read as
a ``quotaql.toml``) and ignored.
"""

from __future__ import annotations

import logging
import os
import random
import stat
import threading
import weakref
from typing import TYPE_CHECKING, Any

from quotaql.config import load_cost_config
from quotaql.cost_analysis import analyze, check_model
from quotaql.errors import ConfigError, CostAnalysisError
from quotaql.instrumentation import names

if TYPE_CHECKING:
    from quotaql.config import Config, CostConfig
    from quotaql.cost_analysis import CostReport
    from quotaql.gate.operation import Operation
    from quotaql.gate.record import OperationRecorder
    from quotaql.policy.quota import Decision

__all__ = ["Candidate", "would_refuse"]

_Stamp = tuple[int, int, int]
# Who decided without the storage: nothing to compare the candidate's debit with.
_NO_STORAGE = frozenset({"fail_open", "fail_closed"})


class Candidate:
    """The candidate weights of one gate: their file, its state, and the sampled operations.

    Args:
        record: the gate's operation recorder (its metrics, log and tenant names).
    """

    def __init__(self, record: OperationRecorder) -> None:
        self._record = record
        self._metrics = record.metrics.candidate if record.metrics is not None else None
        self._path: str | None = None
        self._fraction = 0.0  # candidate_sample as configured
        self.sample = 0.0  # what is sampled now: 0 without a valid candidate
        self.cost: CostConfig | None = None  # the candidate's [cost], once read and valid
        self._seen: _Stamp | None = None  # the file's stamp when last read
        self._pending: _Stamp | None = None  # changed, not yet seen twice
        self._schema: weakref.ref[Any] | None = None  # the schema it was checked against
        self._lock = threading.Lock()
        self._picked: weakref.WeakKeyDictionary[Operation, Decision] = weakref.WeakKeyDictionary()

    # -- the file ---------------------------------------------------------------------------

    def configure(self, config: Config) -> None:
        """Take ``config``'s ``[cost] candidate`` and ``candidate_sample``, and read the file
        (at start, and again with each new ``quotaql.toml``)."""
        with self._lock:
            self._fraction = config.cost.candidate_sample
            self._path = config.cost.candidate
            self._pending = None
            self._schema = None
            if self._path is None:
                self._refused(None)
                return
            self._seen = _stamp(self._path)
            try:
                self._read(self._path, self._seen)
            except Exception as error:  # the gate starts (or reloads) all the same
                self._refused(names.CANDIDATE_INVALID, f"{type(error).__name__}: {error}")

    def poll(self, schema: Any) -> None:
        """The reload timer's look: read the file again once a change has stayed the same
        across two looks (a file being written is not read), and check a candidate read
        against ``schema``. Never raises: a failure is logged and counted."""
        path = self._path
        if path is None:
            return
        try:
            with self._lock:
                stamp = _stamp(path)
                if stamp != self._seen:
                    if stamp != self._pending:  # changed since the last look: maybe mid-write
                        self._pending = stamp
                        return
                    self._seen, self._pending, self._schema = stamp, None, None
                    self._read(path, stamp)
                else:
                    self._pending = None
                self._checked(schema)
        except Exception as error:  # a look must never end the reload thread
            self._fail(names.CANDIDATE_PRICING, f"{path}: {type(error).__name__}: {error}")

    def _read(self, path: str, stamp: _Stamp | None) -> None:
        """Read the candidate at ``path`` (whose stamp is ``stamp``), or refuse it."""
        if stamp is None:
            self._refused(names.CANDIDATE_MISSING, f"{path}: cannot read the file")
            return
        try:
            found = os.stat(path)
        except OSError as error:
            self._refused(names.CANDIDATE_MISSING, f"{path}: {error.strerror or error}")
            return
        if not stat.S_ISREG(found.st_mode):  # a device or a pipe would be read without end
            self._refused(names.CANDIDATE_INVALID, f"{path}: not a regular file")
            return
        size = found.st_size
        if size > names.MAX_CANDIDATE_BYTES:  # refused by its size, before reading it
            self._refused(
                names.CANDIDATE_TOO_LARGE,
                f"{path}: {size} bytes, more than the {names.MAX_CANDIDATE_BYTES} a candidate"
                " may have",
            )
            return
        try:
            cost = load_cost_config(path)
        except ConfigError as error:  # nested too deep for the parser included
            self._refused(names.CANDIDATE_INVALID, str(error))
            return
        self.cost, self.sample = cost, self._fraction
        if self._metrics is not None:
            self._metrics.loaded(True)
        self._record.log.log(
            logging.INFO,
            names.CANDIDATE_LOADED_EVENT,
            "quotaql: candidate weights read from %s: %.4g of the operations are priced"
            " with them too (only its [cost] table; never charged)",
            path,
            self._fraction,
            file=path,
        )

    def _checked(self, schema: Any) -> bool:
        """Whether the candidate read fits ``schema`` (checked once per schema, compiling
        its weights); refused when it names a coordinate the schema lacks."""
        cost = self.cost
        if cost is None:
            return False
        known = self._schema
        if known is not None and known() is schema:
            return True
        try:
            check_model(schema, cost.model)
        except ConfigError as error:
            self._refused(names.CANDIDATE_SCHEMA, str(error))
            return False
        self._schema = weakref.ref(schema)
        return True

    def _refused(self, reason: str | None, message: str = "") -> None:
        """No candidate prices anything now: none configured (``reason`` None), or its file
        was refused for ``reason``, logged and counted."""
        self.cost, self.sample, self._schema = None, 0.0, None
        self._picked.clear()
        if self._metrics is not None:
            self._metrics.loaded(False)
        if reason is not None:
            self._fail(reason, message + "; the candidate is not sampled until it is fixed")

    def _fail(self, reason: str, message: str) -> None:
        if self._metrics is not None:
            self._metrics.error(reason)
        self._record.log.log(
            logging.WARNING,
            names.CANDIDATE_REFUSED_EVENT,
            "quotaql: candidate weights: %s (the live pricing is unchanged)",
            message,
            file=self._path,
            reason=reason,
        )

    # -- the sampled operations --------------------------------------------------------------

    def decided(self, op: Operation, decision: Decision) -> None:
        """The limiter decided ``op``'s debit: sample it (``candidate_sample``), keeping the
        decision (what its subject had) for :meth:`finished`."""
        sample = self.sample
        if not sample or random.random() >= sample:  # noqa: S311  (a sample, not a secret)
            return
        with self._lock:
            self._picked[op] = decision

    def finished(self, op: Operation) -> None:
        """``op`` ended: if it was sampled, price it with the candidate and record how far
        that is from its live price, and whether the candidate would have refused it."""
        if not self._picked:
            return
        with self._lock:
            decision = self._picked.pop(op, None)
            cost = self.cost
        report = op.report
        if decision is None or cost is None or report is None or op.document is None:
            return
        try:
            with self._lock:
                fits = self._checked(op.schema)
            if fits:
                self._compare(op, decision, report, cost)
        except Exception as error:  # never the client's error: counted, logged
            self._fail(names.CANDIDATE_PRICING, f"{type(error).__name__}: {error}")

    def _compare(
        self, op: Operation, decision: Decision, report: CostReport, cost: CostConfig
    ) -> None:
        args = (op.schema, op.document, op.variables, op.operation_name, cost.model)
        refuses = False
        try:
            candidate = analyze(*args, cost.limits)
        except CostAnalysisError:  # past the candidate's limits (or not priced by it)
            refuses = True
            try:
                candidate = analyze(*args)
            except CostAnalysisError:
                candidate = None
        if candidate is not None:
            refuses = refuses or would_refuse(op, decision, report, candidate)
            if self._metrics is not None:
                roots = report.root_field_costs
                self._metrics.compared(
                    report.operation_name,
                    report.cost,
                    candidate.cost,
                    [
                        (coordinate, root.cost, candidate.root_field_costs[coordinate].cost)
                        for coordinate, root in roots.items()
                        if coordinate in candidate.root_field_costs
                    ],
                )
        refuses = refuses and decision.allowed
        if refuses and self._metrics is not None:
            name = self._record.names.name(op.subject)
            self._metrics.would_refuse(op.tier.name, op.subject.key, name)
        span = op.span
        if span is not None:
            if candidate is not None:
                span.set_attribute(names.ATTR_CANDIDATE_COST, candidate.cost)
            span.set_attribute(names.ATTR_CANDIDATE_WOULD_REFUSE, refuses)


def would_refuse(
    op: Operation, decision: Decision, live: CostReport, candidate: CostReport
) -> bool:
    """Whether ``op``, allowed by ``decision`` under its ``live`` price, would have been
    refused at its ``candidate`` price: what some quota would have been debited is more than
    that quota held before the debit (what is left after it, and the debit).

    Each quota's debit is scaled as its live one was: a root field's quota
    (``field:<coordinate>``) by that field's candidate ÷ live cost (at least 1 a selection),
    every other by the whole operation's (at least what ``op`` pays at least, ``op.least``).
    An operation that waited for its turn (a delay tier) reserved its cost ahead of the
    refill: the candidate would have made it wait, not refused it, and it is not counted.
    """
    if not decision.allowed or decision.source in _NO_STORAGE or decision.delay > 0:
        return False
    whole = (max(live.cost, op.least), max(candidate.cost, op.least))
    quotas, statuses = op.quotas, decision.quotas
    debits = op.costs if op.costs is not None else (op.charge,) * len(quotas)
    if not statuses or len(statuses) != len(quotas):  # the tightest one only
        return _scaled(op.charge, whole) > decision.remaining + op.charge
    roots, candidates = live.root_field_costs, candidate.root_field_costs
    for quota, status, debit in zip(quotas, statuses, debits, strict=True):
        amounts = whole
        if quota.name.startswith("field:"):
            coordinate = quota.name.removeprefix("field:")
            root, other = roots.get(coordinate), candidates.get(coordinate)
            if root is not None and other is not None:
                calls = float(root.selections)
                amounts = (max(root.cost, calls), max(other.cost, calls))
        if _scaled(debit, amounts) > status.remaining + debit:
            return True
    return False


def _scaled(debit: float, amounts: tuple[float, float]) -> float:
    """``debit`` (of the live amount ``amounts[0]``) at the candidate's ``amounts[1]``."""
    live, candidate = amounts
    return debit * (candidate / live) if live > 0 else candidate


def _stamp(path: str) -> _Stamp | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_mtime_ns, found.st_size, found.st_ino
