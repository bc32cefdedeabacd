"""Demo and development parts, apart from the product: the embedded broker, the synthetic
workload and corpus, and `rag-monitor demo`."""
