"""The gate's documents: parsed within the parser limits, screened by the static pass, and
validated, each of the last two at most once per document, schema and rules.

A document that passed the static pass without a violation and validated without an error
is kept as checked (:mod:`quotaql.cost_analysis.validation`): its next request skips both.
Anything else (a refusal, a violation let through by shadow mode, a limit not applied because
limiting is off for the subject, an invalid document) is checked again on every request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graphql import GraphQLError, validate

from quotaql.contract import QuotaqlGraphQLError, graphql_error
from quotaql.cost_analysis import validation
from quotaql.cost_analysis._compile import graphql_schema
from quotaql.cost_analysis.analyzer import parse_document
from quotaql.cost_analysis.screen import screen
from quotaql.errors import CostAnalysisError, LimitExceeded
from quotaql.gate import charges, worktime
from quotaql.instrumentation import names
from quotaql.policy.modes import Mode

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from graphql import ASTValidationRule, DocumentNode, GraphQLSchema

    from quotaql.config import Config
    from quotaql.gate.operation import Operation
    from quotaql.gate.refusals import Refusals

__all__ = ["Documents"]


class Documents:
    """What :meth:`~quotaql.gate.Gate.parse`, ``screen``, ``parse_document``, ``known`` and
    ``checked`` do (the gate passes the configuration in force to each call)."""

    __slots__ = ("_log", "_refusals")

    def __init__(self, refusals: Refusals, log: Callable[..., None]) -> None:
        self._refusals = refusals
        self._log = log

    def parse_document(self, config: Config, query: str, op: Operation | None) -> DocumentNode:
        limits = config.cost.limits
        if op is not None and isinstance(query, str):
            op.chars = charges.text_length(query, limits.max_length)
        try:
            return parse_document(query, limits)
        except CostAnalysisError as error:
            raise graphql_error(error) from None

    def parse(
        self,
        config: Config,
        schema: Any,
        query: object,
        rules: Collection[type[ASTValidationRule]] | None,
        op: Operation | None,
    ) -> DocumentNode | list[GraphQLError]:
        if op is not None and op.error is not None:
            return op.errors  # denied before parsing
        if not isinstance(query, str):
            return [QuotaqlGraphQLError("Send the query as a string.",
                                        extensions={"code": "GRAPHQL_PARSE_FAILED"})]  # fmt: skip
        if op is not None:  # parsing, the static pass and validation: its worker time
            worktime.start(op.work)
        try:
            document = self.parse_document(config, query, op)
            errors = self.check(config, op, graphql_schema(schema), document, rules)
        except GraphQLError as error:
            errors = [error]
        finally:
            if op is not None:
                worktime.stop(op.work)
        return errors or document

    def check(
        self,
        config: Config,
        op: Operation | None,
        schema: GraphQLSchema,
        document: DocumentNode,
        rules: Collection[type[ASTValidationRule]] | None,
        validator: Callable[..., list[GraphQLError]] | None = None,
    ) -> list[GraphQLError]:
        """The static pass, then validation (``validator(schema, document, rules)``,
        graphql-core's ``validate`` by default), unless ``document`` was checked before:
        the errors to answer (none: it may run)."""
        key = validation.rules_key(rules)
        if self.known(config, op, schema, document, key):
            return []
        clean = self.screen(config, op, document)
        if isinstance(clean, GraphQLError):
            return [clean]
        errors = (validator or validate)(schema, document, key)
        if not errors and clean:
            validation.keep(schema, document, key, config.cost.limits)
        return errors

    def known(
        self,
        config: Config,
        op: Operation | None,
        schema: GraphQLSchema,
        document: DocumentNode,
        rules: Collection[type[ASTValidationRule]] | None,
    ) -> bool:
        """Whether ``document`` was checked before (then ``op`` is as screened)."""
        limits = config.cost.limits
        if not validation.known(schema, document, validation.rules_key(rules), limits):
            return False
        if op is not None:
            op.screened = op.clean = True
            if not op.chars:
                op.chars = charges.text_length(document, limits.max_length)
        return True

    def checked(
        self,
        config: Config,
        op: Operation | None,
        schema: GraphQLSchema,
        document: DocumentNode,
        rules: Collection[type[ASTValidationRule]] | None,
    ) -> None:
        """``document`` validated without an error (after the static pass of ``op``): kept
        as checked when that pass found nothing."""
        if op is not None and op.clean:
            validation.keep(schema, document, validation.rules_key(rules), config.cost.limits)

    def screen(
        self, config: Config, op: Operation | None, document: DocumentNode
    ) -> GraphQLError | bool:
        """The static pass: the refusal to answer, or whether it found nothing (False: a
        violation let through, in shadow mode or for a subject not limited)."""
        limits = config.cost.limits
        if op is not None:
            op.screened = True
            if not op.chars:
                op.chars = charges.text_length(document, limits.max_length)
        if not limits.screens:
            return self._clean(op)
        try:
            screen(document, limits)
        except LimitExceeded as exceeded:
            if op is not None and op.mode is not Mode.ENFORCE:
                if op.mode is Mode.SHADOW:
                    op.violated(exceeded.code)
                    self._log(op, names.SHADOW_BLOCKED, exceeded.code)
                return False
            error: GraphQLError = graphql_error(exceeded)
            if op is not None:
                self._refusals.failed(op, [error])
            return error
        return self._clean(op)

    @staticmethod
    def _clean(op: Operation | None) -> bool:
        if op is not None:
            op.clean = True
        return True
