"""What the gate says once, at a WARNING, about a configuration or a schema it is given:
settings that are unsafe or weaker than they look, subscriptions whose events cost nothing."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from quotaql.cost_analysis.analyzer import free_subscription_fields
from quotaql.policy.modes import Mode

if TYPE_CHECKING:
    from quotaql.config import Config
    from quotaql.gate.record import OperationRecorder

__all__ = ["configuration", "schema", "staged"]


def configuration(
    record: OperationRecorder, config: Config, storage: Any, leases_shared: bool
) -> None:
    """What ``config`` means that its reader may not expect (``leases_shared``: the
    concurrency limits are counted where every process sees them)."""
    if not leases_shared:
        record.say_once(
            "leases_in_memory",
            f"quotaql: the {type(storage).__name__} storage has no lease storage of its"
            " own: the concurrency limits (max_in_flight) are counted in this process's"
            " memory, per process; pass Gate(leases=...) to share them",
        )
    if config.identity.unknown_keys == "tenant":
        record.say_once(
            "unknown_keys_tenant",
            'quotaql: [identity] unknown_keys = "tenant": every API key is a tenant of its'
            " own, so a client that sends a new key each time gets a new budget each"
            " time; do not use it on a public API (docs/identity.md)",
            logging.WARNING,
        )

    staged(record, config)


def staged(record: OperationRecorder, config: Config) -> None:
    """Say (once per tier and share) which tiers enforce only a share of their subjects, and
    warn of a tier's own ``enforce_share`` that does nothing (its mode is not ``enforce``)."""
    for tier in config.tiers.values():
        share = config.enforce_share_of(tier)
        if share >= 1.0:
            continue
        mode = tier.mode or config.limits.mode
        if mode is Mode.ENFORCE:
            record.say_once(
                f"enforce_share:{tier.name}:{share!r}",
                f"quotaql: tier {tier.name} enforces {share:.4g} of its subjects"
                " (enforce_share); the others run in shadow, counted as"
                ' quotaql_staged_total{enforced="false"} (docs/tuning.md)',
                logging.INFO,
            )
        elif tier.enforce_share is not None:
            record.say_once(
                f"enforce_share_unused:{tier.name}",
                f"quotaql: tier {tier.name} sets enforce_share = {share:.4g} but its mode"
                f" is {mode}: only enforce tiers are staged, so it does nothing",
            )


def schema(record: OperationRecorder, config: Config, schema: Any) -> None:
    """What ``config`` prices in ``schema`` at nothing: the subscription fields whose
    events cost 0 points (each pays only ``min_charge``)."""
    minimum = config.limits.min_charge
    for coordinate in free_subscription_fields(schema, config.cost.model):
        record.say_once(
            f"free_events:{coordinate}",
            f"quotaql: the events of {coordinate} price at 0 points (a scalar without a"
            f" weight): each pays only [limits] min_charge ({minimum:g}); give it a"
            f' weight ([cost.weights] "{coordinate}" = 1) or a @cost directive'
            " (docs/cost-model.md)",
        )
