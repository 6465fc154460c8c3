"""Record values decoded into columns for the Iceberg tables (``tiered-proxy iceberg
--value-format``), and the rows that do not decode kept in a dead-letter table.

- ``binary``: the value stays bytes, as Spark's Kafka source gives it.
- ``avro``: each value is in Confluent's wire format, decoded with the schemas a schema registry
  holds for the topic (:mod:`tiering.spark.avro_values`).
- ``json``: each value is parsed by a schema: one declared (``--value-schema``, Spark DDL) or one
  inferred from the first records a run adds, merged with what the table already has. The fields
  become the struct column ``decoded_value``; the bytes stay in ``value``, so the table is still
  the topic, byte for byte. A field seen for the first time becomes a new column of the struct
  (Iceberg schema evolution: existing rows read it as null); a field whose type changed does not
  match and its row goes to the dead letters.

A value that is not JSON, not an object, or does not match the schema makes the row a dead letter:
it goes, with every Kafka column and the reason, to the table ``<table>_dead_letters``, never
dropped. A null value (a tombstone) is a row with a null ``decoded_value``, not a dead letter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DECODED_COLUMN = "decoded_value"
ERROR_COLUMN = "decode_error"
VALUE_FORMATS = ("binary", "json", "avro")
_CORRUPT = "_tiered_proxy_corrupt"  # from_json's column for what it could not parse


@dataclass(frozen=True)
class ValueDecoding:
    format: str = "binary"
    schema: str | None = None  # Spark DDL of the value's fields; None: inferred (json)
    sample_records: int = 10_000  # records a run infers a JSON schema from
    registry_url: str | None = None  # avro: the schema registry

    def __post_init__(self) -> None:
        if self.format not in VALUE_FORMATS:
            raise ValueError(f"value format {self.format!r}: expected one of {', '.join(VALUE_FORMATS)}")
        if self.schema is not None and self.format != "json":
            raise ValueError("--value-schema declares JSON values' fields: it goes with --value-format json")
        if (self.registry_url is not None) != (self.format == "avro"):
            raise ValueError("--value-format avro and --schema-registry-url go together")
        if self.sample_records < 1:
            raise ValueError(f"the JSON sample must be at least one record, not {self.sample_records}")

    @property
    def decodes(self) -> bool:
        return self.format != "binary"


def dead_letter_table(table: str) -> str:
    return f"{table}_dead_letters"


def declared_schema(ddl: str) -> Any:  # noqa: ANN401 - pyspark's StructType
    """The value's fields from Spark DDL (``id BIGINT, name STRING``); a ValueError names what is wrong."""
    from pyspark.sql.types import DataType, StructType

    try:
        parsed = DataType.fromDDL(ddl)
    except Exception as exc:  # noqa: BLE001 - Spark's parse errors have no common base in Python
        raise ValueError(f"--value-schema {ddl!r} is not Spark DDL: {str(exc).splitlines()[0]}") from None
    if not isinstance(parsed, StructType) or not parsed.fields:
        raise ValueError(f"--value-schema {ddl!r}: expected fields, e.g. 'id BIGINT, name STRING'")
    return parsed


def inferred_schema(spark, df, sample_records: int) -> Any:  # noqa: ANN001, ANN401
    """The fields of the first ``sample_records`` JSON object values in ``df`` (None if none parse)."""
    from pyspark.sql import functions as F  # noqa: N812

    sample = [r.v for r in df.where(F.col("value").isNotNull()).select(F.col("value").cast("string").alias("v"))
              .limit(sample_records).collect()]
    objects = [v for v in sample if v.lstrip().startswith("{")]
    if not objects:
        return None
    schema = spark.read.option("mode", "DROPMALFORMED").json(spark.sparkContext.parallelize(objects)).schema
    return schema if schema.fields else None


def merged(existing: Any, new: Any, *, new_types: bool = False) -> Any:  # noqa: ANN401 - StructType or None
    """The table's fields in their order, then the fields only ``new`` has, at every depth of
    struct. A field in both keeps the table's type (JSON: data of another type is a dead letter),
    or takes ``new``'s with ``new_types`` (Avro: a registry allows only promotions, which Iceberg
    makes too)."""
    from pyspark.sql.types import StructField, StructType

    if existing is None:
        return new
    if new is None:
        return existing
    known = {f.name: f for f in existing.fields}
    fields = []
    for field in existing.fields:
        other = next((f for f in new.fields if f.name == field.name), None)
        if (other is not None and isinstance(field.dataType, StructType)
                and isinstance(other.dataType, StructType)):
            field = StructField(field.name, merged(field.dataType, other.dataType, new_types=new_types), True)
        elif other is not None and new_types:
            field = StructField(field.name, other.dataType, True)
        fields.append(field)
    fields += [StructField(f.name, f.dataType, True) for f in new.fields if f.name not in known]
    return StructType(fields)


def table_schema(spark, table: str) -> Any:  # noqa: ANN001, ANN401
    """The ``decoded_value`` struct the table has, or None."""
    if not spark.catalog.tableExists(table):
        return None
    fields = [f for f in spark.table(table).schema.fields if f.name == DECODED_COLUMN]
    return fields[0].dataType if fields else None


def value_columns(spark, decoding: ValueDecoding, df, existing, topic: str) -> tuple[Any, Any]:  # noqa: ANN001
    """The struct the table's ``decoded_value`` is to have (what it has, plus what the values
    bring), and ``df`` with ``decoded_value`` and ``decode_error``."""
    if decoding.format == "avro":
        from tiering.spark.avro_values import SchemaRegistry, decode_avro, reader_struct

        assert decoding.registry_url is not None
        schemas = SchemaRegistry(decoding.registry_url).subject_schemas(f"{topic}-value")
        schema = merged(existing, reader_struct(spark, schemas.reader), new_types=True)
        return schema, decode_avro(df, schemas, schema, DECODED_COLUMN, ERROR_COLUMN)
    if decoding.schema is not None:
        schema = merged(existing, declared_schema(decoding.schema))
    else:
        schema = merged(existing, inferred_schema(spark, df, decoding.sample_records))
    if schema is None:
        raise ValueError(f"{topic}: no value is a JSON object to infer a schema from; give --value-schema")
    return schema, decode_json(df, schema)


def decode_json(df, schema) -> Any:  # noqa: ANN001, ANN401
    """``df`` with ``decoded_value`` (the value parsed by ``schema``) and ``decode_error`` (why a
    non-null value did not parse, else null)."""
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.types import StringType, StructField, StructType

    with_corrupt = StructType([*schema.fields, StructField(_CORRUPT, StringType(), True)])
    parsed = F.from_json(F.col("value").cast("string"), with_corrupt,
                         {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT})
    df = df.withColumn("_parsed", parsed)
    failed = F.col("value").isNotNull() & (F.col("_parsed").isNull() | F.col(f"_parsed.{_CORRUPT}").isNotNull())
    error = F.when(failed, F.lit(f"not a JSON object of {schema.simpleString()}"))
    fields = [F.col(f"_parsed.`{f.name}`").alias(f.name) for f in schema.fields]
    value = F.when(F.col("_parsed").isNull() | failed, F.lit(None)).otherwise(F.struct(*fields))
    return df.withColumn(DECODED_COLUMN, value).withColumn(ERROR_COLUMN, error).drop("_parsed")


def column_ddl(data_type) -> str:  # noqa: ANN001 - a pyspark DataType
    """A column type as CREATE TABLE takes it, every field name quoted."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, StructType):
        fields = ", ".join(f"`{f.name.replace('`', '``')}`: {column_ddl(f.dataType)}" for f in data_type.fields)
        return f"STRUCT<{fields}>"
    if isinstance(data_type, ArrayType):
        return f"ARRAY<{column_ddl(data_type.elementType)}>"
    if isinstance(data_type, MapType):
        return f"MAP<{column_ddl(data_type.keyType)}, {column_ddl(data_type.valueType)}>"
    return data_type.simpleString()
