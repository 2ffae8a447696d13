"""Records a new metadata log starts with, as `kafka-storage.sh format` writes them: the
metadata.version, and the SCRAM credentials of `--add-scram` (so that SCRAM users exist before
the nodes authenticate to each other with them)."""
from __future__ import annotations

import re

# Kafka 3.7-IV4: the metadata.version whose record versions we write.
METADATA_VERSION_LEVEL = 19
_ADD_SCRAM = re.compile(r"^(SCRAM-SHA-256|SCRAM-SHA-512)=\[(.*)\]$")


class BadScramArgument(ValueError):
    """An --add-scram value kafka-storage.sh would refuse."""


def parse_add_scram(value: str) -> tuple[str, str, str, int | None]:
    """`SCRAM-SHA-256=[name=alice,password=alice-secret]` (optionally `iterations=N`) as
    (mechanism, name, password, iterations)."""
    match = _ADD_SCRAM.match(value.strip())
    if not match:
        raise BadScramArgument(f"--add-scram {value!r} is not MECHANISM=[name=NAME,password=PASSWORD]")
    fields = {}
    for part in match.group(2).split(","):
        key, separator, item = part.partition("=")
        if not separator:
            raise BadScramArgument(f"--add-scram {value!r}: {part!r} is not key=value")
        fields[key.strip()] = item.strip().strip('"')
    if "name" not in fields or "password" not in fields:
        raise BadScramArgument(f"--add-scram {value!r} needs a name and a password")
    iterations = int(fields["iterations"]) if "iterations" in fields else None
    return match.group(1), fields["name"], fields["password"], iterations


def first_records(add_scram: list[str]) -> list[tuple[str, dict]]:
    """What a new metadata log is formatted with."""
    records = [("FeatureLevelRecord", {"name": "metadata.version", "feature_level": METADATA_VERSION_LEVEL})]
    if add_scram:
        from dataclasses import asdict

        from cluster.formats import scram

        for mechanism, name, password, iterations in map(parse_add_scram, add_scram):
            credential = scram.scram_credential(password, mechanism, iterations or scram.MIN_ITERATIONS)
            records.append(("UserScramCredentialRecord", {"name": name, "mechanism": scram.mechanism_code(mechanism),
                                                           **asdict(credential)}))
    return records
