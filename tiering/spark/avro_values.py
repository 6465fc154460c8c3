"""Avro values in Confluent's wire format, decoded by Spark (``tiered-proxy iceberg --value-format
avro``).

A value is a zero magic byte, the 4-byte big-endian id of the schema it was written with, then
the Avro binary encoding. The schemas are a subject's versions in a schema registry that speaks
Confluent's REST API (Confluent's, Karapace, Apicurio's ``/apis/ccompat/v7``), the subject named
by the topic (``<topic>-value``, the serializers' default TopicNameStrategy).

Each value is read with the schema it was written with and resolved to the subject's latest
version (Avro schema resolution: a field added with a default reads as that default from older
records), so every row has the latest version's fields; a version that adds a field adds a column
to the table (Iceberg schema evolution). A value without the header, with a schema id that is not
a version of the subject, or that does not decode with its schema is a dead letter, with the reason.
Spark's own Avro functions do the decoding (``spark-avro`` from Maven Central, on the JVM).
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

_ACCEPT = "application/vnd.schemaregistry.v1+json, application/json"
# A field only the reader schema has, with a default: Avro resolution fills it in for every value
# that decodes, while from_avro's PERMISSIVE mode leaves every field null for one that does not
# (indistinguishable, without it, from a record whose fields are all null).
_DECODED = "_tiered_proxy_decoded"


def _with_sentinel(reader: str) -> str:
    schema = json.loads(reader)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return reader
    return json.dumps({**schema, "fields": [*schema["fields"], {"name": _DECODED, "type": "boolean", "default": True}]})


@dataclass(frozen=True)
class SubjectSchemas:
    subject: str
    writers: dict[int, str]  # schema id -> the Avro schema (JSON) of each version
    reader: str  # the latest version's


class SchemaRegistry:
    """The few calls of Confluent's schema registry API a run needs. Credentials go in the URL
    (``https://user:password@host/``) and are sent as HTTP basic authentication."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"schema registry {url!r}: expected an http(s):// URL")
        self.auth = None
        if parts.username is not None:
            user_info = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            self.auth = "Basic " + base64.b64encode(user_info.encode()).decode()
        netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
        self.url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self.timeout = timeout

    def _get(self, path: str) -> Any:  # noqa: ANN401 - JSON
        request = urllib.request.Request(self.url + path, headers={"Accept": _ACCEPT})
        if self.auth:
            request.add_header("Authorization", self.auth)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                return json.load(answer)
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode(errors="replace")
            if exc.code == 404:
                raise LookupError(f"{self.url}{path}: not found ({detail})") from None
            raise OSError(f"schema registry {self.url}{path}: HTTP {exc.code} {detail}") from None
        except (OSError, ValueError) as exc:
            raise OSError(f"schema registry {self.url}{path}: {exc}") from None

    def subject_schemas(self, subject: str) -> SubjectSchemas:
        quoted = urllib.parse.quote(subject, safe="")
        try:
            versions = sorted(self._get(f"/subjects/{quoted}/versions"))
        except LookupError:
            raise ValueError(f"the schema registry at {self.url} has no subject {subject!r} (the values' "
                             "writers register it: TopicNameStrategy, <topic>-value)") from None
        writers: dict[int, str] = {}
        reader = ""
        for version in versions:
            found = self._get(f"/subjects/{quoted}/versions/{version}")
            if found.get("schemaType", "AVRO") != "AVRO":
                raise ValueError(f"subject {subject!r} version {version} is {found['schemaType']}, not Avro")
            writers[int(found["id"])] = reader = found["schema"]
        if not writers:
            raise ValueError(f"subject {subject!r} has no versions at {self.url}")
        return SubjectSchemas(subject, writers, reader)


def reader_struct(spark, reader: str) -> Any:  # noqa: ANN001, ANN401 - pyspark's
    """The Spark type of a record of the ``reader`` schema (a ValueError if it is not a record)."""
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.avro.functions import from_avro
    from pyspark.sql.types import StructType

    decoded = spark.range(0).select(from_avro(F.lit(b""), reader).alias("v")).schema["v"].dataType
    if not isinstance(decoded, StructType):
        raise ValueError(f"the latest value schema is {decoded.simpleString()}, not a record: nothing to make "
                         "columns of (use --value-format binary)")
    return StructType([f for f in decoded.fields if f.name != _DECODED])


def decode_avro(df, schemas: SubjectSchemas, schema, decoded_column: str, error_column: str) -> Any:  # noqa: ANN001, ANN401
    """``df`` with ``decoded_column`` (the value as a struct of ``schema``'s fields) and
    ``error_column`` (why a non-null value did not decode, else null)."""
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.avro.functions import from_avro

    value = F.col("value")
    framed = (F.length(value) >= 5) & (F.substring(value, 1, 1) == F.lit(b"\x00"))
    schema_id = F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("long")
    payload = F.expr("substring(value, 6)")
    read = None
    reader = _with_sentinel(schemas.reader)
    for writer_id, writer in schemas.writers.items():
        branch = from_avro(payload, writer, {"mode": "PERMISSIVE", "avroSchema": reader})
        read = F.when(schema_id == writer_id, branch) if read is None else read.when(schema_id == writer_id, branch)
    df = df.withColumn("_read", F.when(framed, read))
    error = (F.when(value.isNull(), F.lit(None))
             .when(~framed, F.lit("not in Confluent's wire format (a zero byte, then a 4-byte schema id)"))
             .when(~schema_id.isin(list(schemas.writers)),
                   F.concat(F.lit("schema id "), schema_id.cast("string"),
                            F.lit(f" is not a version of subject {schemas.subject}")))
             .when(F.col(f"_read.{_DECODED}").isNull(),
                   F.concat(F.lit("does not decode as Avro with schema id "), schema_id.cast("string"))))
    latest = {f.name for f in df.schema["_read"].dataType.fields}
    fields = [(F.col(f"_read.`{f.name}`") if f.name in latest else F.lit(None).cast(f.dataType)).alias(f.name)
              for f in schema.fields]
    struct = F.when(error.isNull() & F.col(f"_read.{_DECODED}").isNotNull(), F.struct(*fields))
    return df.withColumn(decoded_column, struct).withColumn(error_column, error).drop("_read")
