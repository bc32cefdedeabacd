"""What crosses a stage boundary: the record and its judgement, the bounded labels, the samples
message, the results line, the weighted estimates and every metric."""
