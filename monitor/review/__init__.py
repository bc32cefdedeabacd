"""`rag-monitor review`: a person labels the records the judge stage queued for review.

The queue (`rag_review`, a file or the topic) carries `ReviewLine`s: a results line (the record,
the judge's claim split and verdicts, its evidence quotes) and why it was queued. The reviewer sees
the question, the chunks with the judge's quotes marked and the answer as the judge's claims, and
says per claim supported / contradicted / not in context, whether the context could answer the
question, whether a refusal was warranted, and a note. Each labelled record is one line of a labels
file in the format `rag-monitor calibrate` reads (`monitor.review.labels`), so the judge is measured
against exactly what the reviewer said about its own claim split.

An entry-point-level package (over the stages: it reads the results contract and adds rows to the
golden set); the command in `monitor.cli.review` only wires it.
"""

from monitor.review.labels import ClaimLabel, Labelling, LabelsFile
from monitor.review.queue import QueueRead, read_queue

__all__ = ["ClaimLabel", "Labelling", "LabelsFile", "QueueRead", "read_queue"]
