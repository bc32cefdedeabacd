"""Kafka plumbing every stage shares: the consumer-group source, offset tracking, the producer,
client settings (security) and topic administration."""
