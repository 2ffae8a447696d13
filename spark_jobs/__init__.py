"""PySpark data source `kraftwerk` (Spark's Kafka connector options and columns) and example jobs.

Needs the `spark` extra: `pip install -e '.[spark]'`. `register(spark)` makes
`spark.read.format("kraftwerk")` (and readStream, write, writeStream) available in a session.
"""


def register(spark) -> None:
    """Register the kraftwerk data source with a SparkSession."""
    from spark_jobs.source import KraftwerkDataSource

    spark.dataSource.register(KraftwerkDataSource)
