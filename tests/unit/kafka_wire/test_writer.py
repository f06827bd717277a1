"""The compiled writers (``kafka_wire/writer.py``) write, for every served API and version, the bytes kio's own
writers write."""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_entity_schema
from kio.serial import entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import Records

from kafka_wire import protocol as kp
from kafka_wire.writer import compiled


def _every_served_schema() -> list[tuple[str, Any]]:
    schemas = []
    for key, (low, high) in sorted({**kp.SERVED_VERSIONS, **kp.SASL_VERSIONS}.items()):
        for version in range(low, high + 1):
            request, response = kp.request_class(key, version), kp.response_class(key, version)
            schemas += [(f"{request.__name__} v{version}", request), (f"{response.__name__} v{version}", response)]
            schemas += [(f"{request.__header_schema__.__name__} v{version}", request.__header_schema__)]
    for name in ("consumer_protocol_subscription", "consumer_protocol_assignment"):
        for version in range(4):
            cls = load_entity_schema(name, version, EntityType.data)
            schemas.append((f"{name} v{version}", cls))
    return schemas


SCHEMAS = _every_served_schema()
st.register_type_strategy(Records, st.binary(max_size=40).map(Records))


@pytest.mark.slow  # some 370 schemas: minutes on a loaded machine
@pytest.mark.parametrize(("name", "cls"), SCHEMAS, ids=[name for name, _ in SCHEMAS])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_the_compiled_writers_write_what_kio_writes(name: str, cls: Any, data: st.DataObject) -> None:
    entity = data.draw(st.from_type(cls))
    expected = io.BytesIO()
    entity_writer(cls)(expected, entity)
    got = bytearray()
    compiled(cls)(got, entity)
    assert bytes(got) == expected.getvalue()
