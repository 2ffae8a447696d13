"""AlterUserScramCredentials as Kafka's ScramControlManager decides it.

Deletions and upsertions are checked per user: a user altered twice in one request gets
DUPLICATE_RESOURCE (and none of its alterations happen), an empty name UNACCEPTABLE_CREDENTIAL, a
mechanism other than SCRAM-SHA-256 (1) or SCRAM-SHA-512 (2) UNSUPPORTED_SASL_MECHANISM, iterations
outside 4096..16384 UNACCEPTABLE_CREDENTIAL, deleting a credential that does not exist
RESOURCE_NOT_FOUND. An upsertion carries the salted password; the controller keeps the stored key
and the server key derived from it, never the password. The records of the accepted users are
written in one batch.
"""
from __future__ import annotations

from cluster.formats.errors import ErrorCode
from cluster.formats.image import MetadataImage
from cluster.formats.scram import (
    HASHES, MAX_ITERATIONS, MIN_ITERATIONS, credential_from_salted,
)
from controller.arguments import expect
from controller.topics import Outcome

DUPLICATE = (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")


def _name_and_mechanism_error(name: str, mechanism: int):
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in HASHES:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def _upsertion_error(upsertion: dict):
    error = _name_and_mechanism_error(upsertion["name"], upsertion["mechanism"])
    if error:
        return error
    if upsertion["iterations"] < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if upsertion["iterations"] > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    return None


def _deletion_error(image: MetadataImage, deletion: dict):
    error = _name_and_mechanism_error(deletion["name"], deletion["mechanism"])
    if error:
        return error
    if deletion["mechanism"] not in image.scram_credentials.get(deletion["name"], {}):
        return ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
    return None


def _checked(item: dict, fields: dict) -> dict:
    expect(item, dict, "credential alteration")
    return {name: expect(item.get(name), kind, name) for name, kind in fields.items()}


async def alter_scram_credentials(image: MetadataImage, deletions: list, upsertions: list) -> Outcome:
    deletions = [_checked(d, {"name": str, "mechanism": int}) for d in deletions]
    upsertions = [_checked(u, {"name": str, "mechanism": int, "iterations": int, "salt": bytes,
                               "salted_password": bytes}) for u in upsertions]
    to_delete: dict[str, dict] = {}
    to_upsert: dict[str, dict] = {}
    errors: dict[str, tuple] = {}
    for deletion in deletions:
        name = deletion["name"]
        if name in errors:
            continue
        if to_delete.pop(name, None) is not None:
            errors[name] = DUPLICATE
        elif error := _deletion_error(image, deletion):
            errors[name] = error
        else:
            to_delete[name] = deletion
    for upsertion in upsertions:
        name = upsertion["name"]
        if name in errors:
            continue
        if to_delete.pop(name, None) is not None or to_upsert.pop(name, None) is not None:
            errors[name] = DUPLICATE
        elif error := _upsertion_error(upsertion):
            errors[name] = error
        else:
            to_upsert[name] = upsertion
    records = [("RemoveUserScramCredentialRecord", {"name": d["name"], "mechanism": d["mechanism"]})
               for d in to_delete.values()]
    records += [("UserScramCredentialRecord", _credential_record(u)) for u in to_upsert.values()]
    results = [{"user": name, "error_code": 0, "error_message": None} for name in [*to_delete, *to_upsert]]
    results += [{"user": name, "error_code": int(code), "error_message": message}
                for name, (code, message) in errors.items()]
    return Outcome(results=results, records=records)


def _credential_record(upsertion: dict) -> dict:
    credential = credential_from_salted(upsertion["salted_password"], upsertion["mechanism"],
                                        upsertion["salt"], upsertion["iterations"])
    return {"name": upsertion["name"], "mechanism": upsertion["mechanism"], "salt": credential.salt,
            "stored_key": credential.stored_key, "server_key": credential.server_key,
            "iterations": credential.iterations}
