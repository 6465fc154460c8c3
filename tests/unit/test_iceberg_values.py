"""The parts of value decoding (tiering/spark/values.py, avro_values.py) that run without Spark:
how the table's struct grows, what the options refuse, and how a registry's answers are read.
The decoding itself runs in Spark and is tested end to end in
tests/integration/test_iceberg_tables.py."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from tiering.spark.avro_values import SchemaRegistry
from tiering.spark.values import ValueDecoding, column_ddl, merged

names = st.sampled_from(["id", "name", "amount", "a", "b", "nested", "x y", "tick`s"])
leaves = st.sampled_from([LongType(), IntegerType(), StringType(), DoubleType(), BooleanType()])


def _structs(depth: int = 2) -> st.SearchStrategy[StructType]:
    types: st.SearchStrategy[DataType] = leaves if depth == 0 else st.one_of(leaves, _structs(depth - 1))
    return st.lists(st.tuples(names, types), max_size=5, unique_by=lambda f: f[0]).map(
        lambda fields: StructType([StructField(n, t, True) for n, t in fields]))


@given(_structs(), _structs())
def test_merged_keeps_the_tables_fields_in_order_and_adds_the_new_ones(existing, new) -> None:
    for new_types in (False, True):
        result = merged(existing, new, new_types=new_types)
        assert [f.name for f in result.fields][:len(existing.fields)] == [f.name for f in existing.fields]
        assert {f.name for f in result.fields} == {f.name for f in existing.fields} | {f.name for f in new.fields}
        by_name = {f.name: f.dataType for f in result.fields}
        for field in new.fields:
            if field.name not in existing.names:
                assert by_name[field.name] == field.dataType
        for field in existing.fields:
            other = next((f for f in new.fields if f.name == field.name), None)
            if other is None:
                assert by_name[field.name] == field.dataType
            elif not (isinstance(field.dataType, StructType) and isinstance(other.dataType, StructType)):
                assert by_name[field.name] == (other.dataType if new_types else field.dataType)


def test_merged_with_nothing_on_one_side_is_the_other() -> None:
    struct = StructType([StructField("id", LongType())])
    assert merged(None, struct) is struct and merged(struct, None) is struct and merged(None, None) is None


def test_column_ddl_quotes_every_field_name() -> None:
    struct = StructType([StructField("x y", LongType()), StructField("tick`s", ArrayType(StringType())),
                         StructField("m", MapType(StringType(), StructType([StructField("a", DoubleType())])))])
    assert column_ddl(struct) == "STRUCT<`x y`: bigint, `tick``s`: ARRAY<string>, `m`: MAP<string, STRUCT<`a`: double>>>"


@pytest.mark.parametrize(("arguments", "message"), [
    (("xml",), "value format 'xml'"),
    (("binary", "id BIGINT"), "goes with --value-format json"),
    (("avro", "id BIGINT", 10, "http://r"), "goes with --value-format json"),
    (("avro",), "--value-format avro and --schema-registry-url go together"),
    (("json", None, 10, "http://r"), "--value-format avro and --schema-registry-url go together"),
    (("json", None, 0), "at least one record"),
])
def test_options_that_do_not_go_together_are_refused(arguments, message) -> None:
    with pytest.raises(ValueError, match=message):
        ValueDecoding(*arguments)


@pytest.fixture
def registry() -> Iterator[tuple[str, dict[str, object], list[tuple[str, str | None]]]]:
    """A loopback HTTP server answering Confluent's schema registry paths from a dict."""
    answers: dict[str, object] = {}
    asked: list[tuple[str, str | None]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            asked.append((self.path, self.headers.get("Authorization")))
            found = answers.get(self.path)
            body = json.dumps(found if found is not None else {"error_code": 40401, "message": "not found"}).encode()
            self.send_response(200 if found is not None else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", answers, asked
    finally:
        server.shutdown()
        server.server_close()


def test_a_subjects_versions_are_its_writers_and_the_latest_its_reader(registry) -> None:
    address, answers, asked = registry
    v1, v2 = '{"type":"record","name":"A","fields":[]}', '{"type":"record","name":"A","fields":[{"name":"x","type":"int","default":0}]}'
    answers["/ccompat/subjects/orders-value/versions"] = [2, 1]
    answers["/ccompat/subjects/orders-value/versions/1"] = {"id": 7, "version": 1, "schema": v1}
    answers["/ccompat/subjects/orders-value/versions/2"] = {"id": 9, "version": 2, "schema": v2}
    schemas = SchemaRegistry(f"http://user:p%40ss@{address}/ccompat/").subject_schemas("orders-value")
    assert schemas.writers == {7: v1, 9: v2} and schemas.reader == v2
    assert {auth for _, auth in asked} == {"Basic dXNlcjpwQHNz"}  # user:p@ss


def test_a_subject_the_registry_lacks_is_named(registry) -> None:
    address, _, _ = registry
    with pytest.raises(ValueError, match=r"has no subject 'orders-value'.*TopicNameStrategy"):
        SchemaRegistry(f"http://{address}").subject_schemas("orders-value")


def test_a_protobuf_subject_is_not_taken_for_avro(registry) -> None:
    address, answers, _ = registry
    answers["/subjects/p-value/versions"] = [1]
    answers["/subjects/p-value/versions/1"] = {"id": 1, "version": 1, "schema": "syntax...", "schemaType": "PROTOBUF"}
    with pytest.raises(ValueError, match="PROTOBUF, not Avro"):
        SchemaRegistry(f"http://{address}").subject_schemas("p-value")


def test_a_registry_url_must_be_http() -> None:
    with pytest.raises(ValueError, match="expected an http"):
        SchemaRegistry("registry:8081")
