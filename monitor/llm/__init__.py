"""What every LLM caller needs, whoever calls: the judges, the golden-set synthesizer, benches.

Plumbing: it imports nothing of the monitor's stages, shared contracts or configuration, so any
caller can use it. One concept a module:

- `config`: the client settings every call takes (model, endpoint, key, timeouts, retries, prices);
- `chat`: the OpenAI-compatible chat-completions POST over plain httpx, with its retries;
- `messages`: the Anthropic SDK client as every caller builds it;
- `batches`: the Message Batches client side (collect, submit, poll, read results);
- `retry`: which statuses are retried, and how long a server asked us to wait (``Retry-After``);
- `outcome`: how a call ended, from an HTTP status or an API error (a closed set, a metric label);
- `usage`: tokens billed, prices, USD, and the upper bounds of what a request can cost;
- `redact`: secrets out of any text that leaves a call (errors, logs);
- `fence`: untrusted text escaped so that it stays data inside a prompt's tags.

The SDK is imported only by `messages` and `batches`: the OpenAI-compatible path needs none.
"""
