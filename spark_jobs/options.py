"""The options of Spark's Kafka connector, parsed and checked before any task runs.

Spark hands a Python data source its options as strings with lower-cased keys. Everything
here is plain data, so that a parsed `SourceOptions` pickles into every task unchanged.
Mistakes fail with a message naming the option, as Spark's Kafka source does.
"""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

EARLIEST = -2  # Spark's per-partition JSON uses Kafka's ListOffsets codes
LATEST = -1

# kafka.* options Spark refuses too, because the connector itself decides them.
_REFUSED_CLIENT_OPTIONS = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "enable.auto.commit": "the source does not commit offsets, it keeps them in its checkpoint",
    "key.deserializer": "keys are always read as bytes; cast the column in a query",
    "value.deserializer": "values are always read as bytes; cast the column in a query",
    "key.serializer": "keys are written as bytes or strings; cast the column in a query",
    "value.serializer": "values are written as bytes or strings; cast the column in a query",
    "interceptor.classes": "interceptors are JVM classes",
}

_SOURCE_OPTIONS = {
    "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
    "startingtimestamp", "endingtimestamp", "startingoffsetsbytimestamp", "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy", "maxoffsetspertrigger", "minpartitions", "failondataloss",
    "includeheaders", "kafkaconsumer.polltimeoutms", "groupidprefix",
}
_SINK_OPTIONS = {"topic", "includeheaders", "transactionalidprefix"}
# Options Spark itself adds to every source or sink (a save path, a query's checkpoint).
_SPARK_OPTIONS = {"path", "checkpointlocation", "queryname"}

DEFAULT_REQUEST_TIMEOUT_MS = 30000
DEFAULT_POLL_TIMEOUT_MS = 120000
# Spark's source reads with the Java consumer, whose default is read_uncommitted (librdkafka's is
# read_committed): a job that does not set kafka.isolation.level reads what it reads on Spark.
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"


class OptionError(ValueError):
    """An option of the kraftwerk source or sink is unknown, malformed or contradicts another."""


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or end reading: a keyword, per-partition offsets, or timestamps.

    `kind` is "earliest", "latest", "offsets" ({topic: {partition: offset}} with -2/-1 allowed),
    "timestamp" (one time in ms for every partition) or "timestamps" ({topic: {partition: ms}}).
    """
    kind: str
    offsets: dict = field(default_factory=dict)
    timestamp: int | None = None
    option: str = ""  # the option it came from, for error messages


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    subscription: str  # "subscribe", "subscribepattern" or "assign"
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assigned: tuple[tuple[str, int], ...] = ()
    starting: OffsetSpec | None = None
    ending: OffsetSpec | None = None
    timestamp_not_found: str = "error"  # startingOffsetsByTimestampStrategy
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    group_id_prefix: str = "spark-kraftwerk"
    client_config: dict = field(default_factory=dict)

    @property
    def request_timeout_s(self) -> float:
        return int(self.client_config.get("request.timeout.ms", DEFAULT_REQUEST_TIMEOUT_MS)) / 1000

    @property
    def read_committed(self) -> bool:
        """kafka.isolation.level=read_committed: offsets end at the last stable offset, aborted records are
        skipped."""
        return self.client_config.get("isolation.level", READ_UNCOMMITTED) == READ_COMMITTED


@dataclass(frozen=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None
    client_config: dict
    # transactionalIdPrefix: each task writes its rows in one transaction, as `<prefix>-<task's partition id>`.
    transactional_id_prefix: str | None = None


def client_config(options: dict) -> dict:
    """librdkafka's configuration from the kafka.* options (bootstrap included)."""
    config = {}
    for key, value in options.items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka."):]
        if name in _REFUSED_CLIENT_OPTIONS:
            raise OptionError(f"Kafka option '{name}' is not supported: {_REFUSED_CLIENT_OPTIONS[name]}")
        config[name] = value
    if not config.get("bootstrap.servers"):
        raise OptionError("Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer")
    return librdkafka_security(config)


_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
# Java client settings whose librdkafka equivalent the translation below writes, or that librdkafka
# has no use for.
_JAVA_ONLY = {"sasl.jaas.config", "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.certificates",
              "ssl.keystore.type", "ssl.keystore.certificate.chain", "ssl.keystore.key"}


def librdkafka_security(config: dict) -> dict:
    """The Java client's security settings a Spark job passes as kafka.* options (the JAAS config, PEM
    or PKCS12 trust and key stores), as librdkafka names them; librdkafka's own names pass as they are."""
    translated = {key: value for key, value in config.items() if key not in _JAVA_ONLY}
    jaas = config.get("sasl.jaas.config")
    if jaas:
        options = {key: re.sub(r"\\(.)", r"\1", value) for key, value in _JAAS_OPTION.findall(jaas)}
        if "OAuthBearerLoginModule" in jaas:
            principal = options.get("unsecuredLoginStringClaim_sub", "")
            translated.update({"enable.sasl.oauthbearer.unsecure.jwt": "true",
                               "sasl.oauthbearer.config": f"principal={principal}"})
        else:
            translated.update({"sasl.username": options.get("username", ""),
                               "sasl.password": options.get("password", "")})
    translated.update(_truststore(config))
    if config.get("ssl.keystore.type", "").upper() == "PEM":
        translated.pop("ssl.keystore.location", None)  # (librdkafka's name for a PKCS12 keystore)
    translated.update(_keystore(config))
    return translated


def _truststore(config: dict) -> dict:
    store_type = config.get("ssl.truststore.type", "JKS").upper()
    if config.get("ssl.truststore.certificates"):
        return {"ssl.ca.pem": config["ssl.truststore.certificates"]}
    if not config.get("ssl.truststore.location"):
        return {}
    if store_type != "PEM":
        raise OptionError(f"Kafka option 'ssl.truststore.type={store_type}' is not supported: give the CA "
                          f"certificates as PEM (ssl.truststore.type=PEM)")
    return {"ssl.ca.location": config["ssl.truststore.location"]}


def _keystore(config: dict) -> dict:
    store_type = config.get("ssl.keystore.type", "JKS").upper()
    if config.get("ssl.keystore.certificate.chain"):
        return {"ssl.certificate.pem": config["ssl.keystore.certificate.chain"],
                "ssl.key.pem": config.get("ssl.keystore.key", "")}
    location = config.get("ssl.keystore.location")
    if not location or store_type == "PKCS12":  # (librdkafka reads a PKCS12 keystore under the same names)
        return {}
    if store_type != "PEM":
        raise OptionError(f"Kafka option 'ssl.keystore.type={store_type}' is not supported: use PEM or PKCS12")
    return {"ssl.certificate.location": location, "ssl.key.location": location}


# librdkafka's fetch queue refills only below queued.min.messages (100,000) after a backoff:
# a task reading one partition as fast as it can wants the queue kept full and large fetches.
READ_AHEAD = {"queued.min.messages": 1_000_000, "fetch.queue.backoff.ms": 0,
              "max.partition.fetch.bytes": 8 << 20, "fetch.max.bytes": 64 << 20}


def consumer_config(options: "SourceOptions") -> dict:
    """What each task's consumer runs with: the kafka.* options over the source's own settings."""
    config = {
        "group.id": f"{options.group_id_prefix}-{uuid.uuid4()}",  # never joined: the partition is assigned
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",  # an offset gone by retention is reported, not skipped silently
        "isolation.level": READ_UNCOMMITTED,
        # The end of the partition, reported with its offset, says that offsets before it that never
        # arrived (transaction markers, aborted or compacted records) hold nothing to read.
        "enable.partition.eof": True,
        **READ_AHEAD,
    }
    config.update(options.client_config)
    return config


def _check_known(options: dict, known: set[str]) -> None:
    for key in options:
        if not key.startswith("kafka.") and key not in known and key not in _SPARK_OPTIONS:
            raise OptionError(f"Unknown option '{key}' for the kraftwerk data source")


def _boolean(options: dict, name: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise OptionError(f"Option '{name}' must be true or false, not {value!r}")
    return value.strip().lower() == "true"


def _positive_int(options: dict, name: str) -> int | None:
    value = options.get(name)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise OptionError(f"Option '{name}' must be a positive integer, not {value!r}") from None
    if number <= 0:
        raise OptionError(f"Option '{name}' must be a positive integer, not {value!r}")
    return number


def _subscription(options: dict) -> dict:
    chosen = [name for name in ("assign", "subscribe", "subscribepattern") if name in options]
    if len(chosen) != 1:
        named = ", ".join(f"'{name}'" for name in chosen) or "none"
        raise OptionError("Exactly one of the options 'assign', 'subscribe' or 'subscribePattern' must be "
                          f"specified; got {named}")
    kind = chosen[0]
    value = options[kind].strip()
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError(f"No topics to subscribe to in option 'subscribe' = {value!r}")
        return {"subscription": kind, "topics": topics}
    if kind == "subscribepattern":
        try:
            re.compile(value)
        except re.error as error:
            raise OptionError(f"Option 'subscribePattern' is not a valid pattern: {error}") from None
        return {"subscription": kind, "pattern": value}
    assigned = tuple((topic, int(p)) for topic, parts in _partition_json("assign", value, list_values=True).items()
                     for p in parts)
    if not assigned:
        raise OptionError(f"No topic partitions to assign in option 'assign' = {value!r}")
    return {"subscription": kind, "assigned": assigned}


def _partition_json(name: str, text: str, list_values: bool = False) -> dict:
    """Spark's JSON shapes: {"topic": [0, 1]} for assign, {"topic": {"0": 23}} for offsets."""
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    expected = '{"topicA":[0,1],"topicB":[2,4]}' if list_values else '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
    if not isinstance(parsed, dict):
        raise OptionError(f"Option '{name}' expects JSON like {expected}, got {text!r}")
    result = {}
    for topic, parts in parsed.items():
        if list_values and isinstance(parts, list) and all(isinstance(p, int) for p in parts):
            result[topic] = parts
        elif not list_values and isinstance(parts, dict) and _integer_map(parts):
            result[topic] = {int(p): int(offset) for p, offset in parts.items()}
        else:
            raise OptionError(f"Option '{name}' expects JSON like {expected}, got {text!r}")
    return result


def _integer_map(parts: dict) -> bool:
    return all(p.lstrip("-").isdigit() and isinstance(v, int) and not isinstance(v, bool) for p, v in parts.items())


def _offset_spec(options: dict, prefix: str, batch: bool) -> OffsetSpec | None:
    """startingX or endingX: a global timestamp wins over per-partition timestamps over offsets."""
    if f"{prefix}timestamp" in options:
        value = options[f"{prefix}timestamp"]
        if not value.strip().isdigit():
            raise OptionError(f"Option '{prefix}Timestamp' must be a time in milliseconds, not {value!r}")
        return OffsetSpec("timestamp", timestamp=int(value), option=f"{prefix}Timestamp")
    if f"{prefix}offsetsbytimestamp" in options:
        name = f"{prefix}OffsetsByTimestamp"
        return OffsetSpec("timestamps", _partition_json(name, options[f"{prefix}offsetsbytimestamp"]), option=name)
    value = options.get(f"{prefix}offsets")
    if value is None:
        return None
    keyword = value.strip().lower()
    refused = "latest" if prefix == "starting" else "earliest"
    if keyword in ("earliest", "latest"):
        if batch and keyword == refused:
            raise OptionError(f"Option '{prefix}Offsets' cannot be {refused} for batch queries")
        return OffsetSpec(keyword, option=f"{prefix}Offsets")
    offsets = _partition_json(f"{prefix}Offsets", value)
    refused_code = LATEST if prefix == "starting" else EARLIEST
    for topic, parts in offsets.items():
        for partition, offset in parts.items():
            if offset < EARLIEST or (batch and offset == refused_code):
                raise OptionError(f"Option '{prefix}Offsets' has offset {offset} for {topic}-{partition}, which "
                                  f"is not allowed{' for batch queries' if batch else ''}")
    return OffsetSpec("offsets", offsets, option=f"{prefix}Offsets")


def _isolation_level(config: dict) -> None:
    """kafka.isolation.level as the Java consumer takes it, lower-cased for librdkafka and the planner."""
    value = config.get("isolation.level")
    if value is None:
        return
    level = value.strip().lower()
    if level not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise OptionError(f"Kafka option 'isolation.level' must be {READ_UNCOMMITTED} or {READ_COMMITTED}, "
                          f"not {value!r}")
    config["isolation.level"] = level


def source_options(options: dict, batch: bool) -> SourceOptions:
    """Parse and check a reader's options; batch says whether this is spark.read (else readStream)."""
    options = {key.lower(): value for key, value in options.items()}
    _check_known(options, _SOURCE_OPTIONS)
    config = client_config(options)
    _isolation_level(config)
    if not batch and ("endingoffsets" in options or "endingtimestamp" in options
                      or "endingoffsetsbytimestamp" in options):
        raise OptionError("Ending offsets ('endingOffsets', 'endingTimestamp', 'endingOffsetsByTimestamp') "
                          "are not supported for streaming queries")
    if batch and "maxoffsetspertrigger" in options:
        raise OptionError("Option 'maxOffsetsPerTrigger' applies to streaming queries only")
    strategy = options.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"Option 'startingOffsetsByTimestampStrategy' must be error or latest, not {strategy!r}")
    return SourceOptions(
        bootstrap_servers=config["bootstrap.servers"], **_subscription(options),
        starting=_offset_spec(options, "starting", batch),
        ending=_offset_spec(options, "ending", batch) if batch else None,
        timestamp_not_found=strategy,
        max_offsets_per_trigger=_positive_int(options, "maxoffsetspertrigger"),
        min_partitions=_positive_int(options, "minpartitions"),
        fail_on_data_loss=_boolean(options, "failondataloss", True),
        include_headers=_boolean(options, "includeheaders", False),
        poll_timeout_ms=_positive_int(options, "kafkaconsumer.polltimeoutms") or DEFAULT_POLL_TIMEOUT_MS,
        group_id_prefix=options.get("groupidprefix", "spark-kraftwerk"),
        client_config=config,
    )


def sink_options(options: dict) -> SinkOptions:
    options = {key.lower(): value for key, value in options.items()}
    _check_known(options, _SINK_OPTIONS)
    config = client_config(options)
    if "transactional.id" in config:
        raise OptionError("Kafka option 'transactional.id' is not supported: every task needs a transactional id "
                          "of its own; set the sink option 'transactionalIdPrefix' instead")
    prefix = options.get("transactionalidprefix")
    if prefix is not None:
        prefix = prefix.strip()
        if not prefix:
            raise OptionError("Option 'transactionalIdPrefix' must not be empty")
        if config.get("acks", "all") not in ("all", "-1"):
            raise OptionError(f"Kafka option 'acks' must be all with 'transactionalIdPrefix', not {config['acks']!r}")
        if config.get("enable.idempotence", "true").strip().lower() != "true":
            raise OptionError("Kafka option 'enable.idempotence' cannot be false with 'transactionalIdPrefix': "
                              "transactions need an idempotent producer")
    return SinkOptions(config["bootstrap.servers"], options.get("topic"), config, prefix)
