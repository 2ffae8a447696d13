"""CreateAcls and DeleteAcls as Kafka's AclControlManager decides them: AccessControlEntryRecords
for new ACLs, RemoveAccessControlEntryRecords for those a filter matches; and the ACLs a filter
matches, for `kraftwerk acl list`.

An ACL that already exists is answered as created and written again never. Each filter of a
DeleteAcls is answered with the ACLs it matched; an ACL matched by two filters is removed once.
More than MAX_RECORDS_PER_USER_OP records refuse the whole request, as Kafka does.
"""
from __future__ import annotations

import dataclasses
import uuid

from cluster.formats.acls import AclBinding, AclFilter, InvalidAcl, check_new_acl
from cluster.formats.errors import ErrorCode
from cluster.formats.image import MetadataImage
from cluster.runtime.time_slices import gently
from controller.arguments import expect, expect_list, optional
from controller.topics import MAX_RECORDS_PER_USER_OP, Outcome, refuse_too_large

_CODES = ("resource_type", "pattern_type", "operation", "permission_type")


async def create_acls(image: MetadataImage, creations: list) -> Outcome:
    if len(expect_list(creations, "creations")) > MAX_RECORDS_PER_USER_OP:
        return refuse_too_large()
    existing = set(image.acls.values())
    outcome = Outcome()
    async for creation in gently(creations):
        acl = _binding(creation)
        try:
            check_new_acl(acl)
        except InvalidAcl as exc:
            outcome.results.append({"error_code": int(exc.code), "error_message": exc.message})
            continue
        if acl not in existing:
            existing.add(acl)
            outcome.records.append(("AccessControlEntryRecord", {"id": _new_id(image), **dataclasses.asdict(acl)}))
        outcome.results.append({"error_code": 0, "error_message": None})
    return outcome


async def delete_acls(image: MetadataImage, filters: list) -> Outcome:
    filters = [_filter(f) for f in expect_list(filters, "filters")]
    outcome = Outcome()
    removed: set[uuid.UUID] = set()
    for acl_filter in filters:
        error = acl_filter.unknown_error()
        if error is not None:
            outcome.results.append({"error_code": int(ErrorCode.INVALID_REQUEST), "error_message": error,
                                    "matching_acls": []})
            continue
        matching = [(acl_id, acl) async for acl_id, acl in gently(list(image.acls.items()))
                    if acl_filter.matches(acl)]
        removed.update(acl_id for acl_id, _ in matching)
        if len(removed) > MAX_RECORDS_PER_USER_OP:
            return refuse_too_large()
        outcome.results.append({"error_code": 0, "error_message": None,
                                "matching_acls": [dataclasses.asdict(acl) for _, acl in matching]})
    outcome.records = [("RemoveAccessControlEntryRecord", {"id": acl_id}) for acl_id in sorted(removed)]
    return outcome


def describe_acls(image: MetadataImage, acl_filter: dict) -> dict:
    """The ACLs a filter matches, as DescribeAcls answers (for the command line, which may not be
    allowed to ask a node)."""
    parsed = _filter(acl_filter)
    error = parsed.unknown_error()
    if error is not None:
        return {"error_code": int(ErrorCode.INVALID_REQUEST), "error_message": error, "acls": []}
    return {"error_code": 0, "error_message": None, "acls": sorted(
        (dataclasses.asdict(acl) for acl in image.acls.values() if parsed.matches(acl)),
        key=lambda acl: tuple(acl.values()))}


def _new_id(image: MetadataImage) -> uuid.UUID:
    while True:
        acl_id = uuid.uuid4()
        if acl_id not in image.acls:
            return acl_id


def _binding(creation) -> AclBinding:
    expect(creation, dict, "creation")
    return AclBinding(**{name: expect(creation.get(name), int, name) for name in _CODES},
                      resource_name=expect(creation.get("resource_name"), str, "resource_name"),
                      principal=expect(creation.get("principal"), str, "principal"),
                      host=expect(creation.get("host"), str, "host"))


def _filter(acl_filter) -> AclFilter:
    expect(acl_filter, dict, "filter")
    return AclFilter(**{name: expect(acl_filter.get(name), int, name) for name in _CODES},
                     resource_name=optional(acl_filter.get("resource_name"), str, "resource_name"),
                     principal=optional(acl_filter.get("principal"), str, "principal"),
                     host=optional(acl_filter.get("host"), str, "host"))
