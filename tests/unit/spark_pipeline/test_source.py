"""The kfed source's schema (``spark_pipeline/source.py``), without a SparkSession: the Kafka source's columns
plus the cluster a record was read from."""

from __future__ import annotations

from spark_pipeline.source import spark_schema


def test_the_source_schema_is_the_kafka_source_schema_plus_cluster_id() -> None:
    assert spark_schema(True).simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>,cluster_id:string>"
    )
    assert [f.name for f in spark_schema(False).fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "cluster_id"
    ]  # fmt: skip
    assert all(f.nullable for f in spark_schema(True).fields)
