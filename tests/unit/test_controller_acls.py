"""The controller's ACL operations: records for new ACLs, none for one that exists, removals per filter."""
from __future__ import annotations

import asyncio
import dataclasses

from cluster.formats.acls import ALLOW, ANY, DENY, LITERAL, MATCH, PREFIXED, READ, TOPIC, WRITE, AclBinding
from cluster.formats.image import MetadataImage
from controller import acls

ORDERS = AclBinding(TOPIC, "orders", LITERAL, "User:alice", "*", READ, ALLOW)
ORD = AclBinding(TOPIC, "ord", PREFIXED, "User:bob", "*", WRITE, DENY)


def applied(image: MetadataImage, outcome) -> None:
    for offset, (name, fields) in enumerate(outcome.records, start=image.offset + 1):
        image.apply(offset, name, fields)


def created(image: MetadataImage, *bindings: AclBinding):
    outcome = asyncio.run(acls.create_acls(image, [dataclasses.asdict(b) for b in bindings]))
    applied(image, outcome)
    return outcome


def every_filter(**fields) -> dict:
    return {"resource_type": ANY, "resource_name": None, "pattern_type": ANY, "principal": None, "host": None,
            "operation": ANY, "permission_type": ANY, **fields}


def test_an_acl_that_exists_is_answered_created_and_not_written_again():
    image = MetadataImage()
    first = created(image, ORDERS, ORD)
    assert [name for name, _ in first.records] == ["AccessControlEntryRecord"] * 2
    again = created(image, ORDERS, dataclasses.replace(ORDERS, resource_name=""))
    assert again.records == []
    assert again.results == [{"error_code": 0, "error_message": None},
                             {"error_code": 42, "error_message": "Invalid empty resource name"}]
    assert len(image.acls) == 2


def test_an_acl_two_filters_match_is_removed_once_and_reported_by_both():
    image = MetadataImage()
    created(image, ORDERS, ORD)
    outcome = asyncio.run(acls.delete_acls(image, [every_filter(resource_name="orders", pattern_type=MATCH),
                                                   every_filter(principal="User:alice"),
                                                   every_filter(operation=0)]))
    assert [name for name, _ in outcome.records] == ["RemoveAccessControlEntryRecord"] * 2
    assert [[m["resource_name"] for m in r["matching_acls"]] for r in outcome.results] == [["orders", "ord"],
                                                                                          ["orders"], []]
    assert outcome.results[2]["error_code"] == 42 and outcome.results[2]["error_message"] == "Unknown entryFilter."
    applied(image, outcome)
    assert image.acls == {}


def test_describe_acls_lists_what_a_filter_matches():
    image = MetadataImage()
    created(image, ORDERS, ORD)
    assert [a["resource_name"] for a in acls.describe_acls(image, every_filter(permission_type=DENY))["acls"]] == ["ord"]
