"""A TLS client's principal, as Kafka names it.

`principal_of(ssl_object, rules)` names the client of an mTLS connection as Kafka's
DefaultKafkaPrincipalBuilder does: the certificate's subject rendered as Java's
X500Principal.getName() renders it, mapped by `ssl.principal.mapping.rules` (SslPrincipalMapper).
`listener_context` is the SSL context a listener serves with (built by `cluster.runtime.tls`).
"""
from __future__ import annotations

import re
import ssl
from dataclasses import dataclass

from cryptography import x509
from cryptography.x509.oid import NameOID

from cluster.formats.config import BrokerConfig, ConfigError
from cluster.runtime.tls import server_context, setting
from node.security.session import ANONYMOUS


def listener_context(config: BrokerConfig, listener_name: str) -> ssl.SSLContext:
    """The context a node's SSL or SASL_SSL listener serves with, its principal mapping rules checked
    first: a rule Kafka refuses is refused at start, not at each client's connection."""
    PrincipalMapper.from_rules(setting(config, listener_name, "ssl.principal.mapping.rules"))
    return server_context(config, listener_name)

# Principals

class NoMatchingRule(ConfigError):
    """No ssl.principal.mapping.rules rule applies to a certificate's name (Kafka closes the connection)."""


def principal_of(ssl_object, rules: str) -> str:
    """The principal of a TLS connection's client: "User:" + its certificate's mapped subject, or
    User:ANONYMOUS when it sent none. Raises NoMatchingRule when no rule maps the subject."""
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return ANONYMOUS
    subject = x509.load_der_x509_certificate(der).subject
    return "User:" + PrincipalMapper.from_rules(rules).name(distinguished_name(subject))


# Java's X500Principal.getName() (RFC 2253) names these attributes by keyword, the others by OID.
RFC2253_KEYWORDS = {NameOID.COMMON_NAME: "CN", NameOID.COUNTRY_NAME: "C", NameOID.LOCALITY_NAME: "L",
                    NameOID.STATE_OR_PROVINCE_NAME: "ST", NameOID.ORGANIZATION_NAME: "O",
                    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU", NameOID.STREET_ADDRESS: "STREET",
                    NameOID.DOMAIN_COMPONENT: "DC", NameOID.USER_ID: "UID"}
# ASN.1 string types and how each encodes its characters, for the #hex form of other attributes.
# Java renders these string types as text (AVA.isDerString), any other as #hex.
DIRECTORY_STRINGS = {12, 19, 20, 22, 27, 30}
STRING_ENCODINGS = {12: "utf-8", 19: "ascii", 20: "latin-1", 22: "ascii", 26: "ascii", 28: "utf-32-be",
                    30: "utf-16-be"}


def distinguished_name(name: x509.Name) -> str:
    """`name` as Java's X500Principal.getName() renders it: RFC 2253, the last RDN first,
    e.g. CN=alice,OU=eng,O=kraftwerk; attributes without a keyword as OID=#<DER hex>."""
    return ",".join("+".join(_attribute(a) for a in rdn) for rdn in reversed(name.rdns))


def _attribute(attribute: x509.NameAttribute) -> str:
    keyword = RFC2253_KEYWORDS.get(attribute.oid)
    tag = attribute._type.value  # the value's ASN.1 string type, which the #hex form carries
    if keyword and tag in DIRECTORY_STRINGS:
        return f"{keyword}={_escape(attribute.value)}"
    data = attribute.value.encode(STRING_ENCODINGS.get(tag, "utf-8"))
    return f"{keyword or attribute.oid.dotted_string}=#{_der(tag, data).hex()}"


def _escape(value: str) -> str:
    """AVA.toRFC2253String's escaping: RFC 2253's characters plus `=` and `#` anywhere, NUL as \\00,
    and every leading and trailing space."""
    escaped = re.sub(r'([,=+<>#;"\\])', r"\\\1", value).replace("\0", "\\00")
    lead = len(escaped) - len(escaped.lstrip(" \r"))
    tail_start = len(escaped.rstrip(" \r"))
    return "".join("\\" + c if i < lead or i >= tail_start else c for i, c in enumerate(escaped))


def _der(tag: int, data: bytes) -> bytes:
    size = len(data)
    if size < 128:
        return bytes([tag, size]) + data
    width = (size.bit_length() + 7) // 8
    return bytes([tag, 0x80 | width]) + size.to_bytes(width, "big") + data


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule of ssl.principal.mapping.rules: DEFAULT, or RULE:pattern/replacement/[LU]."""
    pattern: str | None = None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        regex = _compiled(self.pattern)
        if not regex.fullmatch(dn):
            return None
        result = regex.sub(lambda m: java_replacement(self.replacement, m), dn)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        return f"RULE:{self.pattern}/{self.replacement}" + (f"/{self.case}" if self.case else "")


_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE)


class PrincipalMapper:
    """Kafka's SslPrincipalMapper: the first rule that matches a DN names the principal."""

    _cache: dict[str, "PrincipalMapper"] = {}

    def __init__(self, rules: list[Rule]):
        self.rules = rules

    @classmethod
    def from_rules(cls, text: str | None) -> "PrincipalMapper":
        """Parses (once per text) ssl.principal.mapping.rules; ConfigError for a rule Kafka refuses."""
        text = "DEFAULT" if text is None else text
        if text not in cls._cache:
            rules = [_parse_rule(r) for r in _split_rules(text.strip())]
            cls._cache[text] = cls([r for r in rules if r is not None])
        return cls._cache[text]

    def name(self, dn: str) -> str:
        for rule in self.rules:
            mapped = rule.apply(dn)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"No rules apply to {dn}, rules {self}")

    def __str__(self) -> str:
        return "[" + ", ".join(map(str, self.rules)) + "]"


def _split_rules(text: str) -> list[str]:
    """Java's Matcher.find() loop: after an empty match the next search starts one character on."""
    found, position = [], 0
    while position <= len(text):
        match = _RULE_SPLITTER.search(text, position)
        if not match:
            break
        found.append(match.group(1))
        position = match.end() + (1 if match.end() == match.start() else 0)
    return found


def _parse_rule(text: str) -> Rule | None:
    match = _RULE_PARSER.match(text)
    if match is None or match.end() != len(text):
        raise ConfigError(f"ssl.principal.mapping.rules: invalid rule: `{text}`")
    if match.group(1) is not None:
        return Rule()
    if match.group(2) is None:
        return None  # an empty rule, ignored
    _compiled(match.group(2))
    return Rule(match.group(2), match.group(4), match.group(6))


def _compiled(pattern: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ConfigError(f"ssl.principal.mapping.rules: invalid pattern `{pattern}`: {e}") from None


def java_replacement(replacement: str, match: re.Match) -> str:
    """Java's Matcher.appendReplacement: `$n` a group (digits taken while the number stays a group),
    `${name}` a named group, `\\x` a literal x; a reference past the last group is a literal, as
    SslPrincipalMapper's escapeLiteralBackReferences makes it."""
    out, i, groups = [], 0, match.re.groups
    while i < len(replacement):
        char = replacement[i]
        if char == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
        elif char == "$" and i + 1 < len(replacement) and replacement[i + 1] == "{":
            end = replacement.find("}", i)
            out.append(match.group(replacement[i + 2:end]) or "")
            i = end + 1
        elif char == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit() \
                and int(replacement[i + 1]) <= groups:
            number, i = int(replacement[i + 1]), i + 2
            while i < len(replacement) and replacement[i].isdigit() and number * 10 + int(replacement[i]) <= groups:
                number, i = number * 10 + int(replacement[i]), i + 1
            out.append(match.group(number) or "")
        else:
            out.append(char)
            i += 1
    return "".join(out)
