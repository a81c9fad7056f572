"""What logs, spans and metric labels call a subject (quotaql.instrumentation.tenants)."""

from __future__ import annotations

from quotaql.identity import Subject
from quotaql.instrumentation import names
from quotaql.instrumentation.tenants import TenantLabels, TenantNames, hashed

RAW_KEY = Subject("key:sk_live_4f7a", "key", tenant="sk_live_4f7a")  # [tenants.sk_live_4f7a]
ACME = Subject("key:acme", "key", tenant="acme")
ADDRESS = Subject("ip:203.0.113.9", "address", address="203.0.113.9")
CUSTOM = Subject("id:acme", "custom", tenant="acme")


def test_a_tenant_that_is_its_api_key_is_hashed_unless_allowlisted() -> None:
    plain = TenantNames()
    assert plain.name(RAW_KEY) is None
    assert plain.shown(RAW_KEY) == hashed("key:sk_live_4f7a")
    assert "sk_live" not in plain.shown(RAW_KEY)
    assert TenantNames(["sk_live_4f7a"]).shown(RAW_KEY) == "sk_live_4f7a"


def test_the_allowlist_takes_names_and_namespaced_keys() -> None:
    for entry in ("acme", "key:acme"):
        assert TenantNames([entry]).name(ACME) == "acme"
    assert TenantNames(["ip:203.0.113.9"]).shown(ADDRESS) == "ip:203.0.113.9"
    assert TenantNames(["acme"]).shown(ADDRESS) == hashed("ip:203.0.113.9")


def test_names_from_a_resolver_or_identify_are_shown() -> None:
    assert TenantNames(resolved=True).shown(ACME) == "acme"
    assert TenantNames().shown(CUSTOM) == "acme"
    # an address is never a name, resolver or not
    assert TenantNames(resolved=True).shown(ADDRESS) == hashed("ip:203.0.113.9")


def test_labels_use_the_allowlisted_form_and_names_for_the_top_n() -> None:
    labels = TenantLabels(allowlist=["acme", "key:vip"], top_n=2)
    assert labels.label("key:acme", "acme") == "acme"
    assert labels.label("key:vip") == "key:vip"  # the namespaced form, as it always was
    assert labels.label("id:globex", "globex") == "globex"  # a name that may be shown
    assert labels.label("key:sk_live_4f7a") == hashed("key:sk_live_4f7a")
    assert labels.label("ip:198.51.100.1") == names.OTHER_TENANT  # top-N full


def test_an_attacker_naming_itself_like_an_allowlisted_tenant_is_not_that_tenant() -> None:
    # An unknown key spelled "acme" is not the tenant acme: no tenant, no name.
    forged = Subject("ip:198.51.100.7", "address", address="198.51.100.7")
    names_ = TenantNames(["acme"])
    assert names_.name(forged) is None
    assert TenantLabels(allowlist=["acme"]).label(forged.key, names_.name(forged)) == (
        names.OTHER_TENANT
    )
