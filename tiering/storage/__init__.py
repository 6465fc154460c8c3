"""Where tiered segments live: KIP-405's RemoteStorageManager (``api``), the object layout the stores
share (``object_layout``), the local-folder store (``local_folder``), the S3 store (``s3``), the
location a store records as KIP-917 custom metadata (``segment_location``), what is done to bytes
at rest (``at_rest``, its formats in ``sealed_format``, its keys in ``key_ring`` and
``key_maintenance``), and the store a URI names (``uri``)."""
