"""`python -m monitor.cli`: the command line without the extras check of `rag-monitor`."""

from monitor.cli import app

app()
