"""The ingest stage: Kafka spans → decode → assemble RAG records → slice → sample → record metrics,
and the sampled records onto the samples topic for the judge stage."""
