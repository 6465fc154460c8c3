"""Where tiered segments live: KIP-405's RemoteStorageManager (``api``), the object layout the stores
share (``object_layout``), the local-folder store (``local_folder``), the S3 store (``s3``) and the
location it records as KIP-917 custom metadata (``s3_location``), and the store a URI names
(``uri``)."""
