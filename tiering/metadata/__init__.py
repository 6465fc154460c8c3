"""What is tiered, and where: KIP-405's RemoteLogMetadataManager (``manager``) over the in-memory
state and its state machines (``state``), the record codec (``codec``), the embedded journal store
(``journal_store``) and the metadata-topic store (``topic_store``), the store a URI names (``uri``),
read-only copies for tools and Spark (``view``), and the record of which remote tier a store
describes (``remote_tier_record``)."""
