"""Reading record batches back from the remote tier for Fetch and ListOffsets: the reader
(``reader``) and its caches of segment indexes (``index_cache``) and ``.log`` chunks
(``chunk_cache``)."""
