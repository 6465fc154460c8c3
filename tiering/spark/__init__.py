"""The ``tiered-kafka`` PySpark data source (``source``), the Arrow rows it yields (``rows``), and
the backfill job built on it (``backfill``). Needs the ``spark`` extra."""
