"""Copy a topic into one with a different number of partitions; keys land where Kafka's partitioner puts them.

    python -m spark_jobs.repartition orders orders-12 --partitions 12
    spark-submit spark_jobs/repartition.py orders orders-12 --partitions 12

The target is created (replication factor min(3, nodes)) unless it exists. Keys, values and
headers are copied; every record of one key goes to the one partition Kafka's default
partitioner (murmur2) picks for it, as a Java producer would.
"""
from __future__ import annotations

from spark_jobs.jobs import parser, read_topic, session


def create_topic(bootstrap_servers: str, topic: str, partitions: int) -> None:
    """Create topic unless it exists, with as many replicas as there are nodes, up to 3."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    replicas = min(3, len(admin.list_topics(timeout=30).brokers))
    future = admin.create_topics([NewTopic(topic, partitions, replicas)])[topic]
    try:
        future.result()
    except KafkaException as error:
        if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def repartition(spark, bootstrap_servers: str, source: str, target: str, partitions: int) -> int:
    """Copy every record of source into target; returns the number copied."""
    create_topic(bootstrap_servers, target, partitions)
    records = read_topic(spark, bootstrap_servers, source, includeHeaders="true") \
        .select("key", "value", "headers").cache()
    try:
        copied = records.count()
        records.write.format("kraftwerk").mode("append").option("kafka.bootstrap.servers", bootstrap_servers) \
            .option("topic", target).save()
    finally:
        records.unpersist()
    return copied


def main(argv=None) -> None:
    arguments = parser(__doc__.splitlines()[0])
    arguments.add_argument("source")
    arguments.add_argument("target")
    arguments.add_argument("--partitions", type=int, required=True, help="partitions of the target topic")
    args = arguments.parse_args(argv)
    spark = session("kraftwerk-repartition", args.master)
    try:
        copied = repartition(spark, args.bootstrap_servers, args.source, args.target, args.partitions)
        print(f"copied {copied} records from {args.source} to {args.target} ({args.partitions} partitions)")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
