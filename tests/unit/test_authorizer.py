"""The authorizer's semantics, case by case as Kafka's StandardAuthorizerTest checks them, and the
binding filters of DescribeAcls/DeleteAcls and CreateAcls' checks."""
from __future__ import annotations

import uuid

import pytest

from cluster.formats.acls import (
    ALL, ALLOW, ALTER, ALTER_CONFIGS, ANY, CLUSTER, CREATE, DELETE, DENY, DESCRIBE, DESCRIBE_CONFIGS,
    GROUP, LITERAL, MATCH, PREFIXED, READ, TOPIC, TRANSACTIONAL_ID, WRITE, AclBinding, AclFilter, InvalidAcl,
    check_new_acl,
)
from cluster.formats.config import BrokerConfig, ConfigError
from cluster.formats.image import MetadataImage
from node.security.authorizer import Authorizer

ALICE, BOB = "User:alice", "User:bob"
HOST = "192.168.0.1"


class Acls:
    def __init__(self, super_users=(), allow_if_no_acl=False):
        self.image = MetadataImage()
        self.authorizer = Authorizer(frozenset(super_users), allow_if_no_acl)
        self.offset = 0

    def add(self, resource_type, name, pattern, principal, host, operation, permission) -> uuid.UUID:
        acl_id = uuid.uuid4()
        self.offset += 1
        self.image.apply(self.offset, "AccessControlEntryRecord", {
            "id": acl_id, "resource_type": resource_type, "resource_name": name, "pattern_type": pattern,
            "principal": principal, "host": host, "operation": operation, "permission_type": permission})
        return acl_id

    def remove(self, acl_id: uuid.UUID) -> None:
        self.offset += 1
        self.image.apply(self.offset, "RemoveAccessControlEntryRecord", {"id": acl_id})

    def allows(self, principal, operation, resource_type, name, host=HOST) -> bool:
        return self.authorizer.allows(self.image, principal, host, operation, resource_type, name)


def test_super_users_may_do_anything_even_when_denied():
    acls = Acls(super_users={"User:admin"})
    acls.add(TOPIC, "*", LITERAL, "User:*", "*", ALL, DENY)
    assert acls.allows("User:admin", WRITE, TOPIC, "orders")
    assert acls.allows("User:admin", ALTER, CLUSTER, "kafka-cluster")
    assert not acls.allows(ALICE, WRITE, TOPIC, "orders")


def test_no_acl_denies_unless_allow_everyone_if_no_acl_found():
    assert not Acls().allows(ALICE, READ, TOPIC, "orders")
    assert Acls(allow_if_no_acl=True).allows(ALICE, READ, TOPIC, "orders")


def test_allow_everyone_if_no_acl_found_does_not_apply_once_the_resource_has_acls():
    acls = Acls(allow_if_no_acl=True)
    acls.add(TOPIC, "orders", LITERAL, BOB, "*", READ, ALLOW)
    assert not acls.allows(ALICE, READ, TOPIC, "orders")
    assert acls.allows(BOB, READ, TOPIC, "orders")
    assert acls.allows(ALICE, READ, TOPIC, "payments")  # no ACL on this one


def test_literal_acl_matches_its_name_only():
    acls = Acls()
    acls.add(TOPIC, "foo", LITERAL, ALICE, "*", READ, ALLOW)
    assert acls.allows(ALICE, READ, TOPIC, "foo")
    assert not acls.allows(ALICE, READ, TOPIC, "foobar")
    assert not acls.allows(ALICE, READ, TOPIC, "fo")
    assert not acls.allows(ALICE, READ, GROUP, "foo")  # another resource type


def test_prefixed_acls_match_every_name_they_begin():
    acls = Acls()
    acls.add(TOPIC, "foo", PREFIXED, ALICE, "*", READ, ALLOW)
    acls.add(TOPIC, "foob", LITERAL, ALICE, "*", WRITE, ALLOW)
    acls.add(TOPIC, "f", PREFIXED, ALICE, "*", DESCRIBE_CONFIGS, ALLOW)
    assert acls.allows(ALICE, READ, TOPIC, "foo")
    assert acls.allows(ALICE, READ, TOPIC, "foobar")
    assert not acls.allows(ALICE, READ, TOPIC, "fob")
    assert not acls.allows(ALICE, WRITE, TOPIC, "foobar")  # a LITERAL foob is no prefix
    assert acls.allows(ALICE, WRITE, TOPIC, "foob")
    assert acls.allows(ALICE, DESCRIBE_CONFIGS, TOPIC, "fa")
    assert not acls.allows(ALICE, DESCRIBE_CONFIGS, TOPIC, "gar")


def test_wildcard_literal_matches_every_name():
    acls = Acls()
    acls.add(GROUP, "*", LITERAL, ALICE, "*", READ, ALLOW)
    assert acls.allows(ALICE, READ, GROUP, "any-group")
    assert acls.allows(ALICE, READ, GROUP, "*")
    assert not acls.allows(ALICE, READ, TOPIC, "any-group")


def test_a_prefixed_star_is_not_a_wildcard():
    acls = Acls()
    acls.add(TOPIC, "*", PREFIXED, ALICE, "*", READ, ALLOW)
    assert not acls.allows(ALICE, READ, TOPIC, "orders")
    assert acls.allows(ALICE, READ, TOPIC, "*orders")


def test_deny_beats_allow_whatever_the_pattern():
    acls = Acls()
    acls.add(TOPIC, "*", LITERAL, "User:*", "*", ALL, ALLOW)
    acls.add(TOPIC, "secret", PREFIXED, ALICE, "*", READ, DENY)
    assert not acls.allows(ALICE, READ, TOPIC, "secret-plans")
    assert acls.allows(ALICE, WRITE, TOPIC, "secret-plans")
    assert acls.allows(BOB, READ, TOPIC, "secret-plans")
    assert acls.allows(ALICE, READ, TOPIC, "public")


def test_wildcard_principal_matches_everyone():
    acls = Acls()
    acls.add(TOPIC, "orders", LITERAL, "User:*", "*", WRITE, ALLOW)
    assert acls.allows(ALICE, WRITE, TOPIC, "orders")
    assert acls.allows("User:ANONYMOUS", WRITE, TOPIC, "orders")
    assert not acls.allows(ALICE, READ, TOPIC, "orders")


def test_host_must_be_the_wildcard_or_the_clients_address():
    acls = Acls()
    acls.add(TOPIC, "orders", LITERAL, ALICE, HOST, READ, ALLOW)
    acls.add(TOPIC, "orders", LITERAL, ALICE, "10.0.0.9", WRITE, DENY)
    acls.add(TOPIC, "orders", LITERAL, ALICE, "*", WRITE, ALLOW)
    assert acls.allows(ALICE, READ, TOPIC, "orders", host=HOST)
    assert not acls.allows(ALICE, READ, TOPIC, "orders", host="192.168.0.2")
    assert acls.allows(ALICE, WRITE, TOPIC, "orders", host=HOST)
    assert not acls.allows(ALICE, WRITE, TOPIC, "orders", host="10.0.0.9")


@pytest.mark.parametrize("granted", [READ, WRITE, DELETE, ALTER, DESCRIBE])
def test_allow_of_read_write_delete_alter_implies_describe(granted):
    acls = Acls()
    acls.add(TOPIC, "orders", LITERAL, ALICE, "*", granted, ALLOW)
    assert acls.allows(ALICE, DESCRIBE, TOPIC, "orders")
    assert not acls.allows(ALICE, CREATE, TOPIC, "orders")


def test_alter_configs_implies_describe_configs_and_create_implies_nothing():
    acls = Acls()
    acls.add(TOPIC, "a", LITERAL, ALICE, "*", ALTER_CONFIGS, ALLOW)
    acls.add(TOPIC, "b", LITERAL, ALICE, "*", CREATE, ALLOW)
    assert acls.allows(ALICE, DESCRIBE_CONFIGS, TOPIC, "a")
    assert not acls.allows(ALICE, DESCRIBE, TOPIC, "a")
    assert not acls.allows(ALICE, DESCRIBE, TOPIC, "b")


def test_deny_of_read_does_not_deny_describe_but_deny_of_all_does():
    acls = Acls()
    acls.add(TOPIC, "orders", LITERAL, ALICE, "*", ALL, ALLOW)
    acls.add(TOPIC, "orders", LITERAL, ALICE, "*", READ, DENY)
    assert acls.allows(ALICE, DESCRIBE, TOPIC, "orders")
    assert not acls.allows(ALICE, READ, TOPIC, "orders")
    acls.add(TOPIC, "orders", LITERAL, ALICE, "*", ALL, DENY)
    assert not acls.allows(ALICE, DESCRIBE, TOPIC, "orders")


def test_all_allows_every_operation():
    acls = Acls()
    acls.add(CLUSTER, "kafka-cluster", LITERAL, ALICE, "*", ALL, ALLOW)
    for operation in (CREATE, ALTER, DESCRIBE, ALTER_CONFIGS, DESCRIBE_CONFIGS):
        assert acls.allows(ALICE, operation, CLUSTER, "kafka-cluster")


def test_removed_acls_no_longer_apply():
    acls = Acls()
    acl_id = acls.add(TRANSACTIONAL_ID, "tx", LITERAL, ALICE, "*", WRITE, ALLOW)
    assert acls.allows(ALICE, WRITE, TRANSACTIONAL_ID, "tx")
    acls.remove(acl_id)
    assert not acls.allows(ALICE, WRITE, TRANSACTIONAL_ID, "tx")


def test_thousands_of_acls_are_indexed_not_scanned():
    acls = Acls()
    for i in range(5000):
        acls.add(TOPIC, f"topic-{i}", LITERAL, ALICE, "*", READ, ALLOW)
        acls.add(TOPIC, f"prefix-{i % 7}-", PREFIXED, BOB, "*", WRITE, ALLOW)
    index = acls.authorizer.index(acls.image)
    assert index.prefix_lengths[TOPIC] == (9,)
    assert [a.resource_name for a in index.applying_to(TOPIC, "topic-4321")] == ["topic-4321"]
    assert acls.allows(ALICE, READ, TOPIC, "topic-4999")
    assert acls.allows(BOB, WRITE, TOPIC, "prefix-3-anything")
    assert not acls.allows(BOB, WRITE, TOPIC, "topic-1")


def test_allows_some_is_kafkas_authorize_by_resource_type():
    acls = Acls()
    assert not acls.authorizer.allows_some(acls.image, ALICE, HOST, WRITE, TOPIC)
    acls.add(TOPIC, "orders", PREFIXED, ALICE, "*", WRITE, ALLOW)
    assert acls.authorizer.allows_some(acls.image, ALICE, HOST, WRITE, TOPIC)
    acls.add(TOPIC, "ord", PREFIXED, ALICE, "*", WRITE, DENY)
    assert not acls.authorizer.allows_some(acls.image, ALICE, HOST, WRITE, TOPIC)
    assert Acls(super_users={ALICE}).authorizer.allows_some(MetadataImage(), ALICE, HOST, WRITE, TOPIC)


def test_authorizer_is_on_only_when_named():
    assert Authorizer.from_config(BrokerConfig()) is None
    on = Authorizer.from_config(BrokerConfig({
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin; User:broker", "allow.everyone.if.no.acl.found": "true"}))
    assert on.super_users == {"User:admin", "User:broker"} and on.allow_if_no_acl
    assert Authorizer.from_config(BrokerConfig({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}))
    with pytest.raises(ConfigError):
        Authorizer.from_config(BrokerConfig({"authorizer.class.name": "com.example.MyAuthorizer"}))


# --- binding filters (Kafka's AclBindingFilterTest, ResourcePatternFilterTest) ---

ORDERS_LITERAL = AclBinding(TOPIC, "orders", LITERAL, ALICE, "*", READ, ALLOW)
ORD_PREFIXED = AclBinding(TOPIC, "ord", PREFIXED, BOB, HOST, WRITE, DENY)
WILDCARD_TOPIC = AclBinding(TOPIC, "*", LITERAL, ALICE, "*", DESCRIBE, ALLOW)


def any_filter(**changes) -> AclFilter:
    fields = dict(resource_type=ANY, resource_name=None, pattern_type=ANY, principal=None, host=None,
                  operation=ANY, permission_type=ANY)
    fields.update(changes)
    return AclFilter(**fields)


def selected(filter_: AclFilter) -> list[AclBinding]:
    return [acl for acl in (ORDERS_LITERAL, ORD_PREFIXED, WILDCARD_TOPIC) if filter_.matches(acl)]


def test_filter_of_nothing_but_any_matches_everything():
    assert selected(any_filter()) == [ORDERS_LITERAL, ORD_PREFIXED, WILDCARD_TOPIC]
    assert selected(any_filter(resource_type=GROUP)) == []


def test_filter_by_exact_name_with_any_pattern_type_matches_the_name_only():
    assert selected(any_filter(resource_name="orders")) == [ORDERS_LITERAL]
    assert selected(any_filter(resource_name="ord", pattern_type=PREFIXED)) == [ORD_PREFIXED]
    assert selected(any_filter(resource_name="ord", pattern_type=LITERAL)) == []


def test_match_filter_selects_the_acls_that_apply_to_a_name():
    assert selected(any_filter(resource_name="orders", pattern_type=MATCH)) == [ORDERS_LITERAL, ORD_PREFIXED,
                                                                                WILDCARD_TOPIC]
    assert selected(any_filter(resource_name="payments", pattern_type=MATCH)) == [WILDCARD_TOPIC]


def test_filter_by_entry_fields():
    assert selected(any_filter(principal=BOB)) == [ORD_PREFIXED]
    assert selected(any_filter(host="*")) == [ORDERS_LITERAL, WILDCARD_TOPIC]
    assert selected(any_filter(operation=DESCRIBE)) == [WILDCARD_TOPIC]
    assert selected(any_filter(permission_type=DENY)) == [ORD_PREFIXED]


def test_filters_with_unknown_codes_are_refused():
    assert any_filter(resource_type=0).unknown_error() == "Unknown patternFilter."
    assert any_filter(operation=0).unknown_error() == "Unknown entryFilter."
    assert any_filter(pattern_type=9).unknown_error() == "Unknown patternFilter."
    assert any_filter(permission_type=-1).unknown_error() == "Unknown entryFilter."
    assert any_filter().unknown_error() is None


@pytest.mark.parametrize("acl, message", [
    (AclBinding(CLUSTER, "other", LITERAL, ALICE, "*", ALTER, ALLOW),
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    (AclBinding(TOPIC, "", LITERAL, ALICE, "*", READ, ALLOW), "Invalid empty resource name"),
    (AclBinding(ANY, "x", LITERAL, ALICE, "*", READ, ALLOW), "Invalid resourceType ANY"),
    (AclBinding(TOPIC, "x", MATCH, ALICE, "*", READ, ALLOW), "Invalid patternType MATCH"),
    (AclBinding(TOPIC, "x", LITERAL, ALICE, "*", ANY, ALLOW), "Invalid operation ANY"),
    (AclBinding(TOPIC, "x", LITERAL, ALICE, "*", READ, ANY), "Invalid permissionType ANY"),
])
def test_create_acls_refuses_what_kafka_refuses(acl, message):
    with pytest.raises(InvalidAcl) as refused:
        check_new_acl(acl)
    assert refused.value.message == message


def test_create_acls_takes_a_valid_acl():
    check_new_acl(ORD_PREFIXED)
    check_new_acl(AclBinding(CLUSTER, "kafka-cluster", LITERAL, ALICE, "*", CREATE, ALLOW))


# --- a whole request refused, as Kafka's getErrorResponse answers it ---

def test_a_refused_request_gets_the_top_level_error_alone_or_each_entrys():
    from types import SimpleNamespace

    from kafka.protocol.consumer import JoinGroupRequest, JoinGroupResponse, OffsetCommitRequest, OffsetCommitResponse

    from node.security.authorizer import refusal
    from node.security.session import PLAINTEXT_LISTENER, Session

    acls = Acls()
    broker = SimpleNamespace(authorizer=acls.authorizer, image=acls.image)
    header = SimpleNamespace(api_version=5, session=Session.opened(PLAINTEXT_LISTENER, HOST))
    join = JoinGroupRequest[5](group_id="g", session_timeout_ms=6000, rebalance_timeout_ms=6000, member_id="m",
                               group_instance_id=None, protocol_type="consumer", protocols=[
                                   JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])
    joined = refusal(broker, header, join, JoinGroupResponse, READ, GROUP, "g")
    assert (joined.error_code, joined.member_id, joined.members) == (30, "", [])

    T = OffsetCommitRequest.OffsetCommitRequestTopic
    commit = OffsetCommitRequest[5](group_id="g", generation_id_or_member_epoch=1, member_id="m", topics=[
        T(name="t", partitions=[T.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                               committed_metadata="")])])
    committed = refusal(broker, header, commit, OffsetCommitResponse, READ, GROUP, "g")
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in committed.topics] == [
        ("t", [(0, 30)])]

    acls.add(GROUP, "g", LITERAL, "User:ANONYMOUS", "*", READ, ALLOW)
    assert refusal(broker, header, join, JoinGroupResponse, READ, GROUP, "g") is None
