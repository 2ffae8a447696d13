"""What the `kraftwerk` command prints when something fails: one line a person can act on.

Kafka's error codes become the sentences Kafka's own tools print (`topic 'orders' already
exists.`), never a client library's request and response dump; every failure exits with status 1.
"""
from __future__ import annotations

import sys

import click
from kafka import errors as kafka_errors

from cluster.formats.control import ControlError
from cluster.tools.errors import ClusterError, GroupRefused, TransactionRefused, error_name

# Error codes with the sentence kafka-topics.sh / kafka-consumer-groups.sh would print; {name} is the subject.
TOPIC_MESSAGES = {
    kafka_errors.TopicAlreadyExistsError.errno: "topic '{name}' already exists.",
    kafka_errors.UnknownTopicOrPartitionError.errno: "topic '{name}' does not exist.",
}
GROUP_MESSAGES = {
    kafka_errors.GroupIdNotFoundError.errno: "consumer group '{name}' does not exist.",
    kafka_errors.NonEmptyGroupError.errno: "consumer group '{name}' is not empty: stop its members first.",
}


def _explained(code: int, message: str | None, subject: str) -> str:
    error = kafka_errors.for_code(code)
    return f"{subject}: {message or error.description} ({error.message})"


def topic_error(name: str, code: int, message: str | None = None) -> str:
    """The one line for error `code` on topic `name`; the broker's own message explains the rest."""
    known = TOPIC_MESSAGES.get(code)
    return known.format(name=name) if known else _explained(code, message, f"topic '{name}'")


def group_error(name: str, code: int, message: str | None = None) -> str:
    known = GROUP_MESSAGES.get(code)
    return known.format(name=name) if known else _explained(code, message, f"consumer group '{name}'")


def group_refusal(refused: GroupRefused) -> str:
    """The one line for a refusal the group tools (cluster/tools/group_tools.py) report."""
    if refused.member is not None and refused.code == kafka_errors.UnknownMemberIdError.errno:
        return f"consumer group '{refused.group_id}' has no member '{refused.member}'."
    return group_error(refused.group_id, refused.code)


def transaction_refusal(refused: TransactionRefused) -> str:
    """The one line for a refusal the transaction tools (cluster/tools/transaction_tools.py) report:
    what failed in kafka-transactions.sh's words, then why."""
    if refused.code not in kafka_errors.kafka_errors:  # (a code kafka-python does not know)
        return f"{refused.failed}: {error_name(refused.code)}"
    error = kafka_errors.for_code(refused.code)
    return f"{refused.failed}: {error.description} ({error.message})"


def kafka_exception_text(exc: Exception) -> str:
    """A client library's exception in one line, without the request and response it carries."""
    if isinstance(exc, kafka_errors.BrokerResponseError):
        return f"{exc.description} ({exc.message})"
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return first_line[:300]


class Failed(click.ClickException):
    """A command failed for a reason already phrased for the user."""


def fail(message: str):
    """Stop the command with `Error: message` on stderr and exit status 1."""
    raise Failed(message)


class CommandLine(click.Group):
    """The `kraftwerk` group: every failure, bad arguments included, is one line on stderr and status 1."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            return super().main(args, prog_name or "kraftwerk", complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            command = exc.ctx.command_path if exc.ctx else "kraftwerk"
            _exit_with(f"{exc.format_message().rstrip('.')}. See '{command} --help'.")
        except click.ClickException as exc:
            _exit_with(exc.format_message())
        except click.Abort:
            _exit_with("aborted")
        except GroupRefused as exc:
            _exit_with(group_refusal(exc))
        except TransactionRefused as exc:
            _exit_with(transaction_refusal(exc))
        except (ClusterError, ControlError) as exc:
            _exit_with(str(exc))
        except kafka_errors.KafkaError as exc:
            _exit_with(kafka_exception_text(exc))
        except OSError as exc:
            _exit_with(exc.strerror or str(exc))


def _exit_with(message: str) -> None:
    click.echo(f"Error: {' '.join(message.split())}", err=True)
    sys.exit(1)
