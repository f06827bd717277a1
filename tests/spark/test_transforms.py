"""The warehouse transforms on hand-made rows: pure DataFrame -> DataFrame, no Kafka."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from spark_pipeline.jobs import dwd_clean, dws_aggregate
from spark_pipeline.jobs.common import layer
from spark_pipeline.source import spark_schema
from spark_pipeline.transforms import audit, dwd, dws, ods

UTC = dt.UTC
T0 = 1_800_000_000_000  # 2027-01-15 08:00:00 UTC, a minute boundary


def message(offset: int, value: Any, partition: int = 0, at_ms: int = T0 + 5_000) -> tuple[Any, ...]:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    ts = dt.datetime.fromtimestamp(at_ms / 1000, UTC)
    return (b"k", raw, "T", partition, offset, ts, 0, "c1")


def ev(seq: int, minute: int, kind: str = "click", user: str = "u1", amount: float = 0.0) -> dict[str, Any]:
    return {"id": f"p-{seq}", "producer": "p", "seq": seq, "event_time_ms": T0 + minute * 60_000 + seq,
            "type": kind, "user_id": user, "amount": amount}  # fmt: skip


def raw_df(spark: Any, rows: list[tuple[Any, ...]]) -> Any:
    return spark.createDataFrame(rows, spark_schema(False))


def test_ods_keeps_lineage_and_partitions_by_arrival_date_and_hour(spark: Any) -> None:
    out = ods(raw_df(spark, [message(7, ev(1, 0), partition=3)])).collect()
    assert len(out) == 1
    row = out[0]
    assert (row["topic"], row["partition"], row["offset"], row["cluster_id"]) == ("T", 3, 7, "c1")
    assert (row["dt"], row["hour"]) == ("2027-01-15", 8)
    assert json.loads(row["value"])["id"] == "p-1"


def test_dwd_parses_types_drops_invalid_and_keeps_the_first_copy_of_each_id(spark: Any) -> None:
    rows = [
        message(0, ev(1, 0, "purchase", amount=12.5)),
        message(1, ev(2, 1)),
        message(2, ev(1, 0, "purchase", amount=12.5)),  # resent: same id, later offset
        message(3, b"not json"),
        message(4, {"producer": "p", "event_time_ms": T0}),  # no id
    ]
    out = sorted(dwd(ods(raw_df(spark, rows))).collect(), key=lambda r: r["id"])
    assert [(r["id"], r["offset"]) for r in out] == [("p-1", 0), ("p-2", 1)]
    first = out[0]
    assert first["event_type"] == "purchase" and first["amount"] == 12.5 and first["seq"] == 1
    assert round(first["event_time"].timestamp() * 1000) == first["event_time_ms"] == T0 + 1  # seq 1: T0 + 1 ms
    assert out[1]["amount"] == 0.0


def test_dws_aggregates_per_minute_and_event_type(spark: Any) -> None:
    rows = [
        message(0, ev(1, 0, "purchase", "u1", 10.0)),
        message(1, ev(2, 0, "purchase", "u2", 5.5)),
        message(2, ev(3, 0, "purchase", "u1", 1.0)),
        message(3, ev(4, 0, "click", "u3")),
        message(4, ev(5, 1, "purchase", "u1", 2.0)),
    ]
    out = [
        (r["event_type"], r["events"], r["users"], r["amount"]) for r in dws(dwd(ods(raw_df(spark, rows)))).collect()
    ]
    assert out == [("click", 1, 1, 0.0), ("purchase", 3, 2, 16.5), ("purchase", 1, 1, 2.0)]


def audit_row(offset: int, window_minute: int, count: int, producer: str = "p") -> tuple[Any, ...]:
    record = {"producer": producer, "topic": "T", "window_start_ms": T0 + window_minute * 60_000,
              "window_ms": 60_000, "count": count}  # fmt: skip
    return message(offset, record)


def test_audit_reports_zero_when_everything_arrived_even_with_duplicates(spark: Any) -> None:
    events = dwd(ods(raw_df(spark, [message(0, ev(1, 0)), message(1, ev(2, 0)), message(2, ev(2, 0)),
                                    message(3, ev(3, 1))])))  # fmt: skip
    report = audit(events, raw_df(spark, [audit_row(0, 0, 2), audit_row(1, 1, 1)])).collect()
    assert [(r["expected"], r["arrived"], r["missing"]) for r in report] == [(2, 2, 0), (1, 1, 0)]


def test_audit_reports_a_dropped_message_and_unaccounted_events(spark: Any) -> None:
    events = dwd(ods(raw_df(spark, [message(0, ev(1, 0)), message(1, ev(3, 1))])))
    report = audit(events, raw_df(spark, [audit_row(0, 0, 2), audit_row(1, 1, 1, producer="other")])).collect()
    by_key = {(r["producer"], r["window_start_ms"]): r["missing"] for r in report}
    assert by_key == {("p", T0): 1, ("other", T0 + 60_000): 1, ("p", T0 + 60_000): -1}


def test_the_layer_jobs_rebuild_dwd_and_dws_from_the_layer_below(spark: Any, tmp_path: Path) -> None:
    rows = [message(i, ev(i, i % 2)) for i in range(4)] + [message(9, ev(0, 0))]  # the last is a resend
    ods(raw_df(spark, rows)).write.parquet(layer(tmp_path, "ods", "T"))
    assert dwd_clean.run(spark, "T", tmp_path) == 4
    assert [d.name for d in (tmp_path / "dwd" / "T").iterdir() if d.is_dir()] == ["dt=2027-01-15"]
    assert dws_aggregate.run(spark, "T", tmp_path) == 2
    assert dwd_clean.run(spark, "T", tmp_path) == 4, "a rebuild overwrites the layer"
