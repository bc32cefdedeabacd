"""Where results go: the results file and topic, OTel evaluation events, and the HTTP endpoint
(`/metrics`, `/healthz`, `/readyz`)."""
